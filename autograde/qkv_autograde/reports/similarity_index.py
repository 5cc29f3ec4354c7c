"""The class's fingerprints held compactly, and the pairs of students compared without a structure per pair
(issue 45: make grade's coordinator keeps flat memory as the class grows). similarity.py decides what is evidence;
this module only counts, in memory that grows with the fingerprints the class holds (8 bytes each), never with the
number of pairs:

- every answer keeps its fingerprints as one sorted array of 64-bit hashes (`Held`), not a dict of lines: the
  lines are read again, for the few answers a finding shows;
- how many students hold each fingerprint comes from one sort of every student's set (`ClassIndex`);
- the pairs sharing rare fingerprints are counted one student at a time, through an inverted index of the rare
  fingerprints (`ClassIndex.pairs`): a row of counts for that student against everyone after them;
- the class's norm needs the similarity of every pair, most of them 0: `PairSimilarities` keeps how many pairs
  have each value, which gives the quartiles exactly (and the histogram of the item analysis) without a list of
  n(n - 1)/2 numbers.
"""
import bisect
import collections

import numpy as np

HASHES = np.uint64  # similarity._hash: the first 8 bytes of a blake2b digest


def hashes_of(keys):
    """The sorted array of the fingerprints `keys` (a dict's keys, a set, an array)."""
    return np.unique(np.fromiter(keys, dtype=HASHES))


Held = collections.namedtuple("Held", "student cell notebook hashes")  # one answer cell's fingerprints, compact


class PairSimilarities:
    """The similarity of every pair of students with answers as {value: number of pairs}, the pairs sharing nothing
    (0.0) included: `len` is the number of pairs, iterating gives every pair's value in increasing order (as a list
    would; for small classes), quantile reads the counts."""

    def __init__(self, pairs, counts=()):
        self.pairs = pairs
        self.counts = collections.Counter(dict(counts))

    @classmethod
    def of(cls, values):
        values = list(values)
        return cls(len(values), collections.Counter(v for v in values if v != 0.0))

    @classmethod
    def of_any(cls, values):
        """`values` as PairSimilarities, whether they are already or a list of every pair's similarity."""
        return values if isinstance(values, cls) else cls.of(values)

    def add(self, values):
        """Count nonzero similarities (an array), one per pair."""
        found, times = np.unique(np.asarray(values, dtype=float), return_counts=True)
        self.counts.update(dict(zip(found.tolist(), times.tolist())))

    def __len__(self):
        return self.pairs

    def runs(self):
        """[(value, number of pairs)] in increasing order, the pairs sharing nothing first."""
        zeros = self.pairs - sum(self.counts.values())
        return ([(0.0, zeros)] if zeros else []) + sorted(self.counts.items())

    def __iter__(self):
        for value, times in self.runs():
            yield from (value for _ in range(times))

    def nth(self, k):
        """The k-th smallest similarity (from 0), as sorted(list)[k]."""
        runs = self.runs()
        ends = np.cumsum([times for _, times in runs]).tolist()
        return runs[bisect.bisect_right(ends, k)][0]

    def quantile(self, q):
        """The q-quantile with linear interpolation between order statistics (as similarity.far_out_fence had)."""
        position = q * (self.pairs - 1)
        low = int(position)
        high = min(low + 1, self.pairs - 1)
        return self.nth(low) + (self.nth(high) - self.nth(low)) * (position - low)


class ClassIndex:
    """The answers' fingerprints by student (`held`: Held answers, any order), and which of them are rare."""

    def __init__(self, held, limit_of):
        by_student = collections.defaultdict(list)
        for answer in held:
            by_student[answer.student].append(answer)
        self.students = sorted(by_student)
        self.answers = [by_student[s] for s in self.students]  # each student's answers, in the order given
        self.limit = limit_of(len(self.students))
        sets = [self.set_of(i) for i in range(len(self.students))]  # [n] arrays: each student's fingerprints
        self.sizes = np.array([len(s) for s in sets], dtype=np.int64)
        # every fingerprint of the class once, with how many students hold it
        self.values, which, self.holders = np.unique(np.concatenate(sets) if sets else np.zeros(0, HASHES),
                                                     return_inverse=True, return_counts=True)
        del sets
        owner = np.repeat(np.arange(len(self.students), dtype=np.int32), self.sizes)
        rare = self.holders[which] <= self.limit
        # each student's rare fingerprints (as positions in values), the students one after the other
        self._own_rare, rare_owner = which[rare].astype(np.int32), owner[rare]
        del which, owner, rare
        self._own_first, self._own_end = (np.searchsorted(rare_owner, np.arange(len(self.students)), side=side)
                                          for side in ("left", "right"))
        # the inverted index of the rare fingerprints: their holders (student numbers), fingerprint after fingerprint
        order = np.argsort(self._own_rare, kind="stable")
        self._rare_sorted, self._holder = self._own_rare[order], rare_owner[order]
        self._position = {student: i for i, student in enumerate(self.students)}

    def set_of(self, i):
        """The fingerprints of student number i, as a sorted array."""
        return np.unique(np.concatenate([a.hashes for a in self.answers[i]]))

    def held_by_more_than(self, share):
        """The fingerprints more than `share` of the students hold, as a sorted array."""
        return self.values[self.holders > share * len(self.students)]

    def pairs(self, keep):
        """(kept pairs, PairSimilarities): every pair of students sharing rare fingerprints, counted one student at
        a time; kept: {(a, b): {"shared": n, "similarity": s}} for the pairs where keep(shared, similarity) (both
        arrays) holds, a before b in the students' order."""
        n = len(self.students)
        distribution = PairSimilarities(n * (n - 1) // 2)
        kept = {}
        for i in range(n):
            values = self._own_rare[self._own_first[i]:self._own_end[i]]
            if not len(values):
                continue
            first, end = (np.searchsorted(self._rare_sorted, values, side=side) for side in ("left", "right"))
            others = self._holder[_ranges(first, end)]  # the holders of each of i's rare fingerprints, in turn
            shared = np.bincount(others[others > i], minlength=n)  # [n]: rare fingerprints i shares with each
            partners = np.flatnonzero(shared)
            count = shared[partners]
            smaller = np.maximum(np.minimum(self.sizes[i], self.sizes[partners]), 1)
            similarity = count / smaller
            distribution.add(similarity)
            chosen = keep(count, similarity)
            for j, c, s in zip(partners[chosen].tolist(), count[chosen].tolist(), similarity[chosen].tolist()):
                kept[(self.students[i], self.students[j])] = {"shared": c, "similarity": s}
        return kept, distribution

    def shared_rare(self, a, b):
        """The rare fingerprints both students hold, as a sorted array."""
        i, j = self._position[a], self._position[b]
        both = np.intersect1d(self.set_of(i), self.set_of(j), assume_unique=True)
        where = np.searchsorted(self.values, both)
        return both[self.holders[where] <= self.limit]

    def cells(self, a, b):
        """{cell of a: (cell of b, shared hashes)}: for each answer of a, the answer of b with which it shares most of
        the pair's rare fingerprints (the first such, in b's order)."""
        shared = self.shared_rare(a, b)
        found = {}
        for left in self.answers[self._position[a]]:
            for right in self.answers[self._position[b]]:
                common = np.intersect1d(np.intersect1d(left.hashes, right.hashes, assume_unique=True), shared,
                                        assume_unique=True)
                if len(common) and (left.cell not in found or len(common) > len(found[left.cell][1])):
                    found[left.cell] = (right.cell, set(common.tolist()))
        return found


def _ranges(starts, ends):
    """The concatenated ranges [starts[k], ends[k]) as one array of indices."""
    lengths = ends - starts
    before = np.cumsum(lengths) - lengths  # [k]: how many indices precede range k
    return np.repeat(starts - before, lengths) + np.arange(lengths.sum())
