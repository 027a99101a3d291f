"""A small control-flow view of one PTX kernel, enough to ask which instructions a
path through it executes."""

import re

_LABEL = re.compile(r"^(\$L__BB\d+_\d+):")
_BRANCH = re.compile(r"^(@!?%p\d+\s+)?bra(\.uni)?\s+(\$L__BB\d+_\d+);")


class Cfg:
    """Basic blocks of the first ``.entry`` in `ptx`, with their successors."""

    def __init__(self, ptx):
        body = ptx[ptx.index(".entry") :]
        body = body[body.index("{") + 1 :]
        self.blocks = [[]]  # instructions per block
        self.labels = {}
        for raw in body.splitlines():
            line = raw.strip()
            label = _LABEL.match(line)
            if label:
                self.blocks.append([])
                self.labels[label.group(1)] = len(self.blocks) - 1
            elif line and not line.startswith("//"):
                self.blocks[-1].append(line)
                if _BRANCH.match(line) or line.startswith(("ret;", "exit;")):
                    self.blocks.append([])  # a block ends at every branch
        self.successors = []
        for index, instructions in enumerate(self.blocks):
            last = instructions[-1] if instructions else ""
            branch = _BRANCH.match(last)
            targets = []
            if branch:
                targets.append(self.labels[branch.group(3)])
            falls_through = not (branch and not branch.group(1)) and not last.startswith("ret;")
            if falls_through and index + 1 < len(self.blocks):
                targets.append(index + 1)
            self.successors.append(targets)

    def find(self, fragment, after=-1):
        """Index of the first block after block `after` holding `fragment`."""
        for index in range(after + 1, len(self.blocks)):
            if any(fragment in line for line in self.blocks[index]):
                return index
        raise LookupError(fragment)

    def count(self, index, fragment):
        return sum(fragment in line for line in self.blocks[index])

    def path_counts(self, start, end, fragment, avoid=(), through=None):
        """The numbers of times `fragment` occurs along the simple paths from block
        `start` to block `end` that enter no block holding one of `avoid` (and,
        if given, pass a block holding `through`)."""
        results = set()

        def walk(node, seen, total):
            if any(self.count(node, bad) for bad in avoid):
                return
            total += self.count(node, fragment)
            if node == end:
                path = seen | {node}
                if through is None or any(self.count(b, through) for b in path):
                    results.add(total)
                return
            for nxt in self.successors[node]:
                if nxt not in seen:
                    walk(nxt, seen | {node}, total)

        walk(start, frozenset(), 0)
        return results
