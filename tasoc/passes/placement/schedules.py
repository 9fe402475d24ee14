"""Seed schedules: orders of a step's ops that searches and planners start from.

The step's own order is autodiff's; the light graph's depth-first order makes each
value just before its first reader (what won the GA its RNN rows in issue 18); the
least-memory order is a greedy list schedule that, among the ops ready to run, runs
the one whose run frees the most bytes net (inputs it reads last, less its results),
ties to the step's own order. On an RNN at four times oversubscription it more than
doubles what the depth-first order reaches (issue 32: 0.52 of ideal against 0.21),
since an RNN's backward pass can hold every step's gradients at once or few of them.

The least-peak order (`least_peak`, issue 32's fourth round) aims at the fewest bytes
held at the busiest op, what the lower bound's `least_peak_bytes` says every schedule
must hold. The least-memory greedy looks one op ahead only: it runs a weight
gradient's per-step product (a large result) as soon as its inputs are there, though
the sum that reads it waits for others, so a bidirectional RNN holds every step's
product at once (2.7 GB against the bound's 1.0 on issue 32's brnn). The least-peak
order starts from the lowest-peak of the other seeds and of a *waiting-aware* greedy
(`waiting_aware`: an op's results that some reader cannot yet read count as held),
then moves ops out of the busiest position while the peak falls (`_lower_the_peak`):
an op that makes a value alive across it sinks to just before its value's first
reader, an op that reads a value alive across it for the last time rises to just after
its operands. Its peak (held bytes, by the replay's count) is at most every other
seed's by construction.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import numpy as np

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.memory import tensor_bytes

LOWERING_MOVES = 400
"""The most moves `_lower_the_peak` tries (each an O(values) replay in numpy): a
fraction of a second on a 6.5k-op step."""


def depth_first(dag: Dag) -> tuple[Node, ...]:
    """The light graph's own order: depth-first from the outputs, operands in order."""
    return tuple(dag.with_outputs(dag.outputs).ops)


def depth_first_reversed(dag: Dag) -> tuple[Node, ...]:
    """Depth-first from the outputs taken last to first. A training step returns its
    new params in the forward's order, so the last layer's update comes first: the
    backward runs a layer at a time from the top, each weight's gradient summed and
    applied before the next layer's starts, and a weight's backward reads fall close
    together (issue 32: rnn at 4x, swapping alone, 95.0 % of ideal against the
    least-memory order's 52.3)."""
    return tuple(dag.with_outputs(dag.outputs[::-1]).ops)


class _Ready:
    """What a greedy list schedule over `dag`'s ops knows: each op's readers and
    makers, which values have readers left, the ready ops."""

    def __init__(self, dag: Dag) -> None:
        ops = self.ops = dag.ops
        where = {node: i for i, node in enumerate(ops)}
        self.returned = set(dag.outputs)
        self.readers: dict[Value, list[int]] = {}
        self.successors: list[set[int]] = [set() for _ in ops]
        self.waiting: list[int] = []
        """Per op, the distinct ops making its operands not yet run."""
        for i, node in enumerate(ops):
            for value in dict.fromkeys(node.inputs):
                self.readers.setdefault(value, []).append(i)
            makers = {where[v.node] for v in node.inputs if not v.node.is_arg}
            for maker in makers:
                self.successors[maker].add(i)
            self.waiting.append(len(makers))
        self.left = {value: len(nodes) for value, nodes in self.readers.items()}
        self.size: dict[Value, int] = {}

    def nbytes(self, value: Value) -> int:
        size = self.size.get(value)
        if size is None:
            size = self.size[value] = tensor_bytes(value.sig)
        return size

    def freed(self, i: int) -> int:
        """Bytes op `i` frees: the inputs it reads last (arguments and returned values
        are never freed: the caller holds them)."""
        return sum(
            self.nbytes(v)
            for v in dict.fromkeys(self.ops[i].inputs)
            if self.left[v] == 1 and not v.node.is_arg and v not in self.returned
        )

    def made(self, i: int) -> int:
        return sum(self.nbytes(v) for v in self.ops[i].results)

    def run(self, i: int) -> list[int]:
        """Mark op `i` run; the ops it made ready."""
        for value in dict.fromkeys(self.ops[i].inputs):
            self.left[value] -= 1
        now = []
        for j in self.successors[i]:
            self.waiting[j] -= 1
            if self.waiting[j] == 0:
                now.append(j)
        return now


def least_memory(dag: Dag) -> tuple[Node, ...]:
    """The greedy least-memory order (module docstring). O(ops log ops)."""
    state = _Ready(dag)
    ops = state.ops

    def gain(i: int) -> int:
        return state.freed(i) - state.made(i)

    ready = [(-gain(i), i) for i in range(len(ops)) if state.waiting[i] == 0]
    heapq.heapify(ready)
    done = [False] * len(ops)
    order: list[Node] = []
    while ready:
        rank, i = heapq.heappop(ready)
        if done[i]:
            continue
        if -gain(i) != rank:  # a value it reads lost another reader since: ranked again
            heapq.heappush(ready, (-gain(i), i))
            continue
        done[i] = True
        order.append(ops[i])
        made_ready = state.run(i)
        for value in dict.fromkeys(ops[i].inputs):
            for j in state.readers[value] if state.left[value] == 1 else ():
                if not done[j] and state.waiting[j] == 0:
                    heapq.heappush(ready, (-gain(j), j))
        for j in made_ready:
            heapq.heappush(ready, (-gain(j), j))
    return tuple(order)


def waiting_aware(dag: Dag) -> tuple[Node, ...]:
    """A greedy list schedule that runs, among the ready ops, the one that leaves the
    fewest bytes held: the results some reader of which still waits for another
    operand (returned results too), less the bytes it frees; then the least net
    allocation, then the step's own order. A large result whose reader cannot run yet
    (a gradient's per-step product before the sum reaches it) waits. O(ops x ready
    ops): the ready set is scanned at every pick, since a pick can make another
    op's results readable at once."""
    state = _Ready(dag)
    ops = state.ops
    ready = {i for i in range(len(ops)) if state.waiting[i] == 0}
    order: list[Node] = []
    while ready:

        def key(i: int) -> tuple[int, int, int]:
            held = sum(
                state.nbytes(v)
                for v in ops[i].results
                if v in state.returned
                or any(state.waiting[j] > 1 for j in state.readers.get(v, ()))
            )
            freed = state.freed(i)
            return held - freed, state.made(i) - freed, i

        i = min(ready, key=key)
        ready.discard(i)
        order.append(ops[i])
        ready.update(state.run(i))
    return tuple(order)


class _Lives:
    """The bytes held along an order of `dag`'s ops: a result from its op to its last
    reader, an argument from the start to its last reader (a placed step may free it
    there, `memory.free`), each to the end when returned — what the lower bound's
    `least_peak_bytes` counts; in numpy over the step's values."""

    def __init__(self, dag: Dag) -> None:
        ops = dag.ops
        where = {node: i for i, node in enumerate(ops)}
        arguments = [arg.out for arg in dag.args]
        values = arguments + [v for node in ops for v in node.results]
        index = {v: k for k, v in enumerate(values)}
        returned = set(dag.outputs)
        self.count = len(ops)
        self.maker = np.array([where.get(v.node, -1) for v in values], dtype=np.int64)
        self.size = np.array([tensor_bytes(v.sig) for v in values], dtype=np.int64)
        self.returned = np.array([v in returned for v in values], dtype=bool)
        edges = [(index[v], where[n]) for n in ops for v in dict.fromkeys(n.inputs)]
        self.edge_value = np.array([e[0] for e in edges], dtype=np.int64)
        self.edge_reader = np.array([e[1] for e in edges], dtype=np.int64)

    def spans(self, position: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each value's first and last position held when op `i` runs at `position[i]`."""
        start = np.where(self.maker < 0, 0, position[self.maker])
        end = start.copy()
        np.maximum.at(end, self.edge_value, position[self.edge_reader])
        end[self.returned] = self.count - 1
        return start, end

    def profile(self, position: np.ndarray) -> np.ndarray:
        """The bytes held while each position's op runs."""
        start, end = self.spans(position)
        change = np.zeros(self.count + 1, dtype=np.int64)
        np.add.at(change, start, self.size)
        np.add.at(change, end + 1, -self.size)
        return np.cumsum(change)[:-1]


def held_peak(dag: Dag, order: Sequence[Node]) -> int:
    """The most bytes `order` holds while one op runs (`_Lives`' count)."""
    lives = _Lives(dag)
    return int(lives.profile(_positions(dag, order)).max(initial=0))


def _positions(dag: Dag, order: Sequence[Node]) -> np.ndarray:
    where = {node: i for i, node in enumerate(order)}
    return np.array([where[node] for node in dag.ops], dtype=np.int64)


def least_peak(dag: Dag, moves: int = LOWERING_MOVES) -> tuple[Node, ...]:
    """The least-peak order (module docstring): the lowest-peak start, lowered."""
    lives = _Lives(dag)
    starts: list[Callable[[Dag], tuple[Node, ...]]] = [
        depth_first,
        depth_first_reversed,
        least_memory,
        waiting_aware,
    ]
    orders = [start(dag) for start in starts]
    best = min(orders, key=lambda order: lives.profile(_positions(dag, order)).max(initial=0))
    return _lower_the_peak(dag, lives, best, moves)


def _lower_the_peak(
    dag: Dag, lives: _Lives, order: tuple[Node, ...], moves: int
) -> tuple[Node, ...]:
    """`order` with ops moved out of its busiest position while that lowers the peak
    (module docstring), at most `moves` tried; a move is kept only when the peak falls,
    so the result's peak is at most `order`'s."""
    ops = dag.ops
    where = {node: i for i, node in enumerate(ops)}
    makers = [[where[v.node] for v in n.inputs if not v.node.is_arg] for n in ops]
    readers: list[list[int]] = [[] for _ in ops]
    for i, parents in enumerate(makers):
        for p in set(parents):
            readers[p].append(i)
    sequence = [where[node] for node in order]  # op indices in run order
    position = _positions(dag, order)
    peak_profile = lives.profile(position)
    tried = 0
    failed: set[tuple[int, int]] = set()
    while tried < moves:
        busiest = int(peak_profile.argmax())
        start, end = lives.spans(position)
        across = np.nonzero((start < busiest) & (end > busiest))[0]
        candidates = []
        for k in across[np.argsort(-lives.size[across], kind="stable")]:
            maker = int(lives.maker[k])  # -1 for an argument: nothing to sink
            readers_at = (int(position[r]) for r in readers[maker]) if maker >= 0 else ()
            first = min(readers_at, default=lives.count)
            if maker >= 0 and first > busiest:  # sinks to just before its first reader
                candidates.append((maker, first - 1))
            last = int(end[k])
            reader = sequence[last]
            rise = max((int(position[p]) for p in makers[reader]), default=-1) + 1
            if rise <= busiest:  # rises to just after its operands
                candidates.append((reader, rise))
        moved = False
        for op, to in candidates:
            if (op, to) in failed or tried >= moves:
                continue
            tried += 1
            trial = sequence.copy()
            trial.remove(op)
            trial.insert(to, op)
            trial_position = np.empty_like(position)
            trial_position[trial] = np.arange(len(trial))
            trial_profile = lives.profile(trial_position)
            if _height(trial_profile) < _height(peak_profile):
                sequence, position, peak_profile = trial, trial_position, trial_profile
                moved = True
                break
            failed.add((op, to))
        if not moved:
            break
    return tuple(ops[i] for i in sequence)


def _height(profile: np.ndarray) -> tuple[int, int]:
    """What lowering the peak lowers: the peak, then how many positions reach it (a
    move that clears one of several equal peaks is progress toward the next)."""
    top = int(profile.max(initial=0))
    return top, int((profile == top).sum())


def seed_orders(dag: Dag) -> list[tuple[Node, ...]]:
    """The step's own order, the reversed depth-first, depth-first, least-memory and
    least-peak ones, distinct."""
    seeds = (
        tuple(dag.ops),
        depth_first_reversed(dag),
        depth_first(dag),
        least_memory(dag),
        least_peak(dag),
    )
    return list(dict.fromkeys(seeds))
