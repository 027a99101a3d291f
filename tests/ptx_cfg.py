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

    def path_counts(self, start, end, fragment, avoid=(), through=None, cap=8):
        """The numbers of times `fragment` occurs (counted up to `cap`) along the
        paths from block `start` to block `end` that take no loop's back edge
        (the first pass through every loop), enter no block holding one of
        `avoid`, and, if `through` is given, pass a block holding it.

        Dynamic programming over the loop-free graph: linear in its size, where
        enumerating paths is exponential in the number of branches."""
        blocked = {i for i in range(len(self.blocks)) if any(self.count(i, a) for a in avoid)}
        if start in blocked:
            return set()
        # Depth-first order from `start`; an edge to a block on the stack is a back edge.
        order, back, state = [], set(), {}
        stack = [(start, iter(self.successors[start]))]
        state[start] = "open"
        while stack:
            node, successors = stack[-1]
            for nxt in successors:
                if nxt in blocked:
                    continue
                if state.get(nxt) == "open":
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = "open"
                    stack.append((nxt, iter(self.successors[nxt])))
                    break
            else:
                stack.pop()
                state[node] = "done"
                order.append(node)
        order.reverse()  # a topological order of the loop-free graph
        reach = {start: set()}
        for node in order:
            if node not in reach:
                continue
            here = self.count(node, fragment)
            passed = through is not None and self.count(node, through) > 0
            incoming = reach[node] or ({(0, False)} if node == start else set())
            states = {(min(c + here, cap), t or passed) for c, t in incoming}
            reach[node] = states
            for nxt in self.successors[node]:
                if nxt not in blocked and (node, nxt) not in back:
                    reach.setdefault(nxt, set()).update(states)
        return {c for c, t in reach.get(end, set()) if through is None or t}
