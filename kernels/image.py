"""Image kernels for the frame pipeline (examples/frame_pipeline.py).

Canny-style edges, then per-tile lists of edge points whose length is known
only on the GPU, then per-tile orientation histograms and an overlay built from
those lists::

    rgb -> gray -> blur (two passes) -> Sobel (magnitude, direction)
        -> non-maximum suppression (weak/strong) -> hysteresis (a few passes)
        -> per-tile edge-point lists -> histograms + overlay

Every stage is a device function shared by all ways of getting memory. The
list stage comes in three flavours: allocated inside the kernel from a devalloc
arena (`arena_lists`), written at offsets the host computed after a count pass
(`count_tiles`, `fill_tiles`), or written into worst-case space per tile.
"""

import math

import numpy as np
from numba import cuda, float32, int32, uint8

import devalloc

TILE = 32  # a tile is 32 x 32 pixels, one block of 32 x 8 threads
ROWS_PER_THREAD = TILE // 8
TILE_THREADS = TILE * 8
BINS = 8  # orientation histogram bins
POINT = 3  # an edge point: y, x, orientation bin (int32 each)
LOW, HIGH = 30.0, 80.0  # hysteresis thresholds, in Sobel units of 0..255 gray
HYSTERESIS_PASSES = 6
NO_LIST = -1

PALETTE = np.array(  # overlay colour per orientation bin
    [[255, 64, 64], [255, 160, 32], [240, 240, 40], [64, 220, 64],
     [40, 220, 220], [64, 128, 255], [160, 80, 255], [255, 64, 200]],
    dtype=np.uint8,
)  # fmt: skip


def tiles(height, width):
    return -(-height // TILE), -(-width // TILE)


# -- per-pixel stages (launch with 2-D grids of 16 x 16 threads) -----------------------


@cuda.jit
def render(photo, frame, center_x, center_y, zoom, seed):
    """A camera frame: the photo panned and zoomed (bilinear), plus sensor noise."""
    x, y = cuda.grid(2)
    height, width = frame.shape[0], frame.shape[1]
    if x >= width or y >= height:
        return
    ph, pw = photo.shape[0], photo.shape[1]
    scale = float32(zoom) * min(float32(ph) / height, float32(pw) / width)
    sx = min(max(float32(center_x) + (x - width * float32(0.5)) * scale, float32(0)), pw - 1.001)
    sy = min(max(float32(center_y) + (y - height * float32(0.5)) * scale, float32(0)), ph - 1.001)
    x0, y0 = int32(sx), int32(sy)
    fx, fy = sx - x0, sy - y0
    h = (x * 73856093) ^ (y * 19349663) ^ (seed * 83492791)
    h = (h ^ (h >> 13)) * 1274126177
    noise = float32((h >> 16) & 0xF) - float32(7.5)
    for c in range(3):
        top = photo[y0, x0, c] * (1 - fx) + photo[y0, x0 + 1, c] * fx
        bottom = photo[y0 + 1, x0, c] * (1 - fx) + photo[y0 + 1, x0 + 1, c] * fx
        value = top * (1 - fy) + bottom * fy + noise
        frame[y, x, c] = uint8(min(max(value, float32(0)), float32(255)))


@cuda.jit
def grayscale(rgb, gray):
    x, y = cuda.grid(2)
    if y < gray.shape[0] and x < gray.shape[1]:
        gray[y, x] = (
            float32(0.299) * rgb[y, x, 0]
            + float32(0.587) * rgb[y, x, 1]
            + float32(0.114) * rgb[y, x, 2]
        )


@cuda.jit(device=True)
def _clamp(i, n):
    return min(max(i, 0), n - 1)


@cuda.jit
def blur_rows(src, dst):
    """5-tap Gaussian (1 4 6 4 1)/16 along x, borders clamped."""
    x, y = cuda.grid(2)
    height, width = src.shape
    if y < height and x < width:
        acc = float32(6) * src[y, x]
        acc += float32(4) * (src[y, _clamp(x - 1, width)] + src[y, _clamp(x + 1, width)])
        acc += src[y, _clamp(x - 2, width)] + src[y, _clamp(x + 2, width)]
        dst[y, x] = acc * float32(1 / 16)


@cuda.jit
def blur_columns(src, dst):
    x, y = cuda.grid(2)
    height, width = src.shape
    if y < height and x < width:
        acc = float32(6) * src[y, x]
        acc += float32(4) * (src[_clamp(y - 1, height), x] + src[_clamp(y + 1, height), x])
        acc += src[_clamp(y - 2, height), x] + src[_clamp(y + 2, height), x]
        dst[y, x] = acc * float32(1 / 16)


@cuda.jit(device=True)
def sobel_at(img, y, x):
    height, width = img.shape
    ym, yp = _clamp(y - 1, height), _clamp(y + 1, height)
    xm, xp = _clamp(x - 1, width), _clamp(x + 1, width)
    gx = (img[ym, xp] + 2 * img[y, xp] + img[yp, xp]) - (img[ym, xm] + 2 * img[y, xm] + img[yp, xm])
    gy = (img[yp, xm] + 2 * img[yp, x] + img[yp, xp]) - (img[ym, xm] + 2 * img[ym, x] + img[ym, xp])
    return gx, gy


@cuda.jit(device=True)
def octant(gx, gy):
    """Orientation of (gx, gy) in 8 bins of 45 degrees, bin 0 centred on +x."""
    angle = math.atan2(gy, gx)  # -pi .. pi
    b = int32(math.floor(angle * float32(4 / math.pi) + float32(0.5)))
    return (b + BINS) % BINS


@cuda.jit
def sobel(img, magnitude, direction):
    """Gradient magnitude and its direction folded into 4 (0, 45, 90, 135 degrees)."""
    x, y = cuda.grid(2)
    if y < img.shape[0] and x < img.shape[1]:
        gx, gy = sobel_at(img, y, x)
        magnitude[y, x] = math.sqrt(gx * gx + gy * gy)
        direction[y, x] = octant(gx, gy) % 4


@cuda.jit
def suppress(magnitude, direction, strength):
    """Non-maximum suppression: 2 strong, 1 weak, 0 not an edge."""
    x, y = cuda.grid(2)
    height, width = magnitude.shape
    if y >= height or x >= width:
        return
    d = direction[y, x]
    dy = 0 if d == 0 else (1 if d != 3 else -1)
    dx = 0 if d == 2 else 1
    m = magnitude[y, x]
    before = magnitude[_clamp(y - dy, height), _clamp(x - dx, width)]
    after = magnitude[_clamp(y + dy, height), _clamp(x + dx, width)]
    kind = 0
    if m >= before and m > after and m >= LOW:
        kind = 2 if m >= HIGH else 1
    strength[y, x] = kind


@cuda.jit
def seed_edges(strength, edges):
    x, y = cuda.grid(2)
    if y < edges.shape[0] and x < edges.shape[1]:
        edges[y, x] = 1 if strength[y, x] == 2 else 0


@cuda.jit
def grow_edges(strength, src, dst):
    """One hysteresis pass: a weak pixel next to an edge becomes an edge."""
    x, y = cuda.grid(2)
    height, width = src.shape
    if y >= height or x >= width:
        return
    edge = src[y, x]
    if edge == 0 and strength[y, x] == 1:
        for dy in range(-1, 2):
            for dx in range(-1, 2):
                if src[_clamp(y + dy, height), _clamp(x + dx, width)] != 0:
                    edge = 1
    dst[y, x] = edge


# -- per-tile stages (one block of 32 x 8 threads per tile) -----------------------------


@cuda.jit(device=True)
def tile_scan(edges):
    """Edge pixels of this block's tile: (this thread's first index in the tile's
    list, the tile's total), in row-major pixel order."""
    counts = cuda.shared.array(TILE_THREADS, int32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tid = ty * TILE + tx
    y0, x0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    mine = 0
    for r in range(ROWS_PER_THREAD):
        y, x = y0 + r * 8 + ty, x0 + tx
        if y < edges.shape[0] and x < edges.shape[1] and edges[y, x] != 0:
            mine += 1
    counts[tid] = mine
    cuda.syncthreads()
    step = 1
    while step < TILE_THREADS:  # Hillis-Steele inclusive scan
        add = counts[tid - step] if tid >= step else 0
        cuda.syncthreads()
        counts[tid] += add
        cuda.syncthreads()
        step *= 2
    total = counts[TILE_THREADS - 1]
    first = counts[tid] - mine
    cuda.syncthreads()
    return first, total


@cuda.jit(device=True)
def write_points(edges, img, points, first):
    """This thread's edge points, from index `first` of the tile's list."""
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    y0, x0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    i = first
    for r in range(ROWS_PER_THREAD):
        y, x = y0 + r * 8 + ty, x0 + tx
        if y < edges.shape[0] and x < edges.shape[1] and edges[y, x] != 0:
            gx, gy = sobel_at(img, y, x)
            points[i, 0] = y
            points[i, 1] = x
            points[i, 2] = octant(gx, gy)
            i += 1


@cuda.jit(device=True)
def consume_points(points, rgb, palette, hist, overlay):
    """Orientation histogram of the tile's points, and the overlay: the tile
    dimmed, its edge points painted by orientation."""
    bins = cuda.shared.array(BINS, int32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    tid = ty * TILE + tx
    tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    if tid < BINS:
        bins[tid] = 0
    y0, x0 = cuda.blockIdx.y * TILE, cuda.blockIdx.x * TILE
    for r in range(ROWS_PER_THREAD):
        y, x = y0 + r * 8 + ty, x0 + tx
        if y < rgb.shape[0] and x < rgb.shape[1]:
            for c in range(3):
                overlay[y, x, c] = rgb[y, x, c] // 3
    cuda.syncthreads()
    for i in range(tid, points.shape[0], TILE_THREADS):
        b = points[i, 2]
        cuda.atomic.add(bins, b, 1)
        for c in range(3):
            overlay[points[i, 0], points[i, 1], c] = palette[b, c]
    cuda.syncthreads()
    if tid < BINS:
        hist[tile, tid] = bins[tid]


# Register caps: the allocator's general path holds ~66 registers, the entry's
# fold of the previous launch's counts 34; the compiler sizes the whole kernel
# for them, though they run once per block. Capped, the tile work keeps its
# occupancy (ptxas: arena_consume 40 -> 32 registers, no spills; arena_lists
# 72 -> 40, its spills in the allocator's rarely taken paths: its one thread's
# request takes the lone lane's fast path). On the H200 (2026-12-02, 4K):
# arena_consume 49.5 -> 43.1 us, arena_lists 58.0 -> 55.1 us at 48 (56 and 64:
# no better; consume_tiles 37.4, fill_tiles 45.8 us); at 1080p, 40 registers
# made 24.5 us with the lone lane's path and 25.0 without it (fill_tiles 20.3).
@devalloc.kernel(max_registers=40)
def arena_lists(arena, edges, img, table):
    """Count the tile's edge points, allocate its list from the arena (the size is
    known only here), fill it, and record (offset, length) in `table`."""
    first, total = tile_scan(edges)
    tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    where = cuda.shared.array(1, np.int64)
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        points = arena.alloc((total, POINT), np.int32)
        where[0] = NO_LIST
        if points.shape[0] == total:  # otherwise the arena was full
            where[0] = arena.offset(points)
        table[tile, 0] = where[0]
        table[tile, 1] = total
    cuda.syncthreads()
    if where[0] != NO_LIST:
        write_points(edges, img, arena.view(where[0], (total, POINT), np.int32), first)


@devalloc.kernel(max_registers=32)
def arena_consume(arena, table, rgb, palette, hist, overlay):
    tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    # An offset of NO_LIST gives a zero-size view: an empty tile, or a full arena.
    points = arena.view(table[tile, 0], (table[tile, 1], POINT), np.int32)
    consume_points(points, rgb, palette, hist, overlay)


@cuda.jit
def count_tiles(edges, counts):
    _, total = tile_scan(edges)
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        counts[cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x] = total


@cuda.jit
def fill_tiles(edges, img, starts, counts, points):
    """Write each tile's points at points[starts[tile]:], recording its count."""
    first, total = tile_scan(edges)
    tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        counts[tile] = total
    write_points(edges, img, points[starts[tile] : starts[tile] + total], first)


@cuda.jit
def counter_lists(edges, img, used, points, starts, counts):
    """`arena_lists` as a CUDA programmer writes it without an allocator: each
    tile's thread 0 takes its list's rows from one counter (`used[0]`, zeroed
    before the frame) with one atomic, the others wait at a barrier; a list
    past the end of `points` is left empty (count 0). Lists go where
    `consume_tiles` reads them (starts, counts). The baseline of what dynamic
    sizing costs in this kernel, with none of an allocator's bookkeeping."""
    first, total = tile_scan(edges)
    tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    where = cuda.shared.array(1, np.int64)
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        where[0] = cuda.atomic.add(used, 0, total)
    cuda.syncthreads()
    start = where[0]
    fits = start + total <= points.shape[0]
    if cuda.threadIdx.x == 0 and cuda.threadIdx.y == 0:
        starts[tile] = start
        counts[tile] = total if fits else 0
    if fits:
        write_points(edges, img, points[start : start + total], first)


@cuda.jit
def consume_tiles(points, starts, counts, rgb, palette, hist, overlay):
    tile = cuda.blockIdx.y * cuda.gridDim.x + cuda.blockIdx.x
    start = starts[tile]
    consume_points(points[start : start + counts[tile]], rgb, palette, hist, overlay)


def _signatures():
    from numba import types

    u8_2, u8_3 = types.uint8[:, :], types.uint8[:, :, :]
    f4_2 = types.float32[:, :]
    i8_1, i8_2, i4_2 = types.int64[:], types.int64[:, :], types.int32[:, :]
    return {
        "render": (u8_3, u8_3, types.float64, types.float64, types.float64, types.int64),
        "grayscale": (u8_3, f4_2),
        "blur_rows": (f4_2, f4_2),
        "blur_columns": (f4_2, f4_2),
        "sobel": (f4_2, f4_2, u8_2),
        "suppress": (f4_2, u8_2, u8_2),
        "seed_edges": (u8_2, u8_2),
        "grow_edges": (u8_2, u8_2, u8_2),
        "arena_lists": (u8_2, f4_2, i8_2),
        "arena_consume": (i8_2, u8_3, u8_2, i4_2, u8_3),
        "count_tiles": (u8_2, i8_1),
        "fill_tiles": (u8_2, f4_2, i8_1, i8_1, i4_2),
        "counter_lists": (u8_2, f4_2, i8_1, i4_2, i8_1, i8_1),
        "consume_tiles": (i4_2, i8_1, i8_1, u8_3, u8_2, i4_2, u8_3),
    }


PTX_SIGNATURES = _signatures()
