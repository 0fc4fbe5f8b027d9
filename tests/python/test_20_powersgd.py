"""chorus.torch._powersgd: the PowerSGD communication hook (issue 24), on fake DDP buckets.

Every rank generates every rank's gradients (a seed of rank, iteration and bucket), so each rank
computes the expected results alone, with plain torch and no communication:
- a reference written here from the paper (Vogels et al. 2019, Algorithm 1 with Algorithm 2's error
  feedback), run tensor by tensor over the list of all the group's ranks' gradients, gives the
  hook's output, error memory and iteration counter, float64 within 1e-5 (measured at 1 to 4
  ranks: at most 5.4e-15; the closed forms below at most 1.5e-10);
- closed forms: before start_powerSGD_iter the plain average; gradients whose group mean has rank
  <= r come back as the exact average from the first compressed iteration on, and the error
  memory is then the running sum of (G_w - mean G); the approximation of a matrix is P Q^T with P
  orthonormal and Q the state's warm Q; the error memory is M - P Q^T.
Runs at every world size of the suite (1 to 4 ranks); groups take ranks of each parity.
"""

import pytest
import torch

import chorus
from chorus.torch._powersgd import PowerSGDState, powerSGD_hook

# Two buckets per backward; per r in {1, 2} (min_compression_rate 2): the matrices are compressed,
# except (2, 3); the vectors are averaged exactly. (6, 2, 3, 3) is read as 6 x 18.
BUCKETS = [[(12, 10), (12,), (6, 2, 3, 3), (2, 3), (8, 9)], [(7, 11), (7,)]]
COMPRESSED = [[True, False, True, False, True], [True, False]]
TOLERANCE = 1e-5


class FakeBucket:
    """torch's GradBucket, over real tensors: the gradients are views into one flat buffer."""

    def __init__(self, index, grads, last):
        self._index, self._last = index, last
        self._buffer = torch.cat([g.reshape(-1) for g in grads])
        self._grads, offset = [], 0
        for g in grads:
            self._grads.append(self._buffer[offset:offset + g.numel()].view(g.shape))
            offset += g.numel()
        self._params = [torch.nn.Parameter(torch.zeros_like(g)) for g in grads]

    def buffer(self):
        return self._buffer

    def index(self):
        return self._index

    def is_last(self):
        return self._last

    def gradients(self):
        return self._grads

    def parameters(self):
        return self._params


def gradients(rank, iteration, index, dtype=torch.float64):
    """Rank `rank`'s gradients of bucket `index` at `iteration`."""
    generator = torch.Generator().manual_seed(10007 * iteration + 101 * index + rank)
    return [torch.randn(shape, generator=generator, dtype=torch.float64).to(dtype)
            for shape in BUCKETS[index]]


def low_rank_gradients(rank, iteration, index, r):
    """Matrices A B_w^T, A shared by all ranks (n x r), B_w this rank's: the mean has rank r."""
    shared = torch.Generator().manual_seed(7919 * iteration + index)
    own = torch.Generator().manual_seed(7919 * iteration + 31 * index + 1000 + rank)
    grads = []
    for shape in BUCKETS[index]:
        if len(shape) < 2:
            grads.append(torch.randn(shape, generator=own, dtype=torch.float64))
            continue
        n = shape[0]
        m = torch.Size(shape[1:]).numel()
        a = torch.randn(n, r, generator=shared, dtype=torch.float64)
        b = torch.randn(m, r, generator=own, dtype=torch.float64)
        grads.append((a @ b.t()).view(shape))
    return grads


def flat(grads):
    return torch.cat([g.reshape(-1) for g in grads])


def mean_of(grads_by_rank):
    return torch.stack([flat(g) for g in grads_by_rank.values()]).mean(0)


def gram_schmidt(p, epsilon):
    """Orthonormal columns spanning those of p: each column minus its projections on the ones
    before it, divided by its norm plus epsilon."""
    columns = []
    for i in range(p.shape[1]):
        v = p[:, i].clone()
        for u in columns:
            v = v - torch.dot(u, v) * u
        columns.append(v / (torch.linalg.norm(v) + epsilon))
    return torch.stack(columns, dim=1)


class Reference:
    """Algorithm 1 (one power-iteration step, rank r) with error feedback, in one process over the
    gradients of every rank of the group, one matrix at a time."""

    def __init__(self, r=1, min_compression_rate=2, error_feedback=True, warm_start=True,
                 epsilon=0.0, seed=0):
        self.r, self.rate, self.epsilon = r, min_compression_rate, epsilon
        self.error_feedback, self.warm_start = error_feedback, warm_start
        self.generator = torch.Generator().manual_seed(seed)
        self.errors = {}  # (bucket, position, rank) -> n x m
        self.qs = {}      # (bucket, position) -> m x r

    def shape(self, shape):
        """(n, m, r) when a tensor of `shape` is compressed, else None."""
        if len(shape) < 2:
            return None
        n, m = shape[0], torch.Size(shape[1:]).numel()
        r = min(self.r, n, m)
        return (n, m, r) if n * m >= self.rate * r * (n + m) else None

    def step(self, index, grads_by_rank):
        """The flat averaged bucket every rank receives, and each rank's flat error memory."""
        ranks = sorted(grads_by_rank)
        out, errors = [], {w: [] for w in ranks}
        for position, shape in enumerate(BUCKETS[index]):
            dims = self.shape(shape)
            if dims is None:
                out.append(torch.stack([grads_by_rank[w][position] for w in ranks]).mean(0))
                for w in ranks:
                    errors[w].append(torch.zeros(shape, dtype=torch.float64))
                continue
            n, m, r = dims
            ms = {}
            for w in ranks:
                e = self.errors.get((index, position, w), torch.zeros(n, m, dtype=torch.float64))
                ms[w] = grads_by_rank[w][position].reshape(n, m) + e
            q = self.qs.get((index, position))
            if q is None or not self.warm_start:
                q = torch.randn((m, r), generator=self.generator, dtype=torch.float32).double()
            p = gram_schmidt(sum(ms[w] @ q for w in ranks) / len(ranks), self.epsilon)
            q = sum(ms[w].t() @ p for w in ranks) / len(ranks)
            approximation = p @ q.t()
            self.qs[(index, position)] = q
            out.append(approximation)
            for w in ranks:
                e = ms[w] - approximation if self.error_feedback else torch.zeros_like(ms[w])
                self.errors[(index, position, w)] = e
                errors[w].append(e)
        return flat(out), {w: flat(e) for w, e in errors.items()}


def my_group(rank_list, rank, size):
    if rank_list is None:
        return list(range(size))
    return next(g for g in rank_list if rank in g)


def run_hook(state, rank, iteration, make_grads, group):
    """Calls the hook on both buckets of `iteration`; [(bucket, output, grads_by_rank)]."""
    results = []
    for index in range(len(BUCKETS)):
        grads_by_rank = {w: make_grads(w, iteration, index) for w in group}
        bucket = FakeBucket(index, grads_by_rank[rank], index == len(BUCKETS) - 1)
        future = powerSGD_hook(state, bucket)
        out = future.wait()
        assert out is future.value()
        assert out.dtype == bucket.buffer().dtype and out.shape == bucket.buffer().shape
        results.append((bucket, out, grads_by_rank))
    return results


def assert_close(got, expected, what):
    error = (got - expected).abs().max().item()
    assert error <= TOLERANCE, f"{what}: max |hook - expected| = {error}"


def parity_groups(size):
    return [g for g in (list(range(0, size, 2)), list(range(1, size, 2))) if g]


@pytest.mark.parametrize("r,error_feedback,warm_start,epsilon,groups", [
    (1, True, True, 0.0, False), (2, True, True, 0.0, False), (2, True, False, 0.0, False),
    (1, False, True, 1e-8, False), (2, True, True, 0.0, True)], ids=[
    "r1", "r2", "r2-cold", "r1-no-feedback-eps", "r2-groups"])
def test_matches_reference(rank, size, r, error_feedback, warm_start, epsilon, groups):
    rank_list = parity_groups(size) if groups else None
    group = my_group(rank_list, rank, size)
    start = 2
    state = PowerSGDState(rank_list=rank_list, matrix_approximation_rank=r,
                          start_powerSGD_iter=start, use_error_feedback=error_feedback,
                          warm_start=warm_start, orthogonalization_epsilon=epsilon, random_seed=5)
    reference = Reference(r, 2, error_feedback, warm_start, epsilon, seed=5)
    for iteration in range(start + 5):
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, gradients, group):
            what = f"iteration {iteration}, bucket {bucket.index()}"
            if iteration < start:
                assert_close(out, mean_of(grads_by_rank), what)
                assert not state.error_dict and not state.q_memory_dict
                continue
            expected, errors = reference.step(bucket.index(), grads_by_rank)
            assert_close(out, expected, what)
            if error_feedback:
                assert_close(state.error_dict[bucket.index()], errors[rank], what + " error")
            else:
                assert bucket.index() not in state.error_dict
        assert state.iteration == iteration + 1


def test_plain_average_before_start(rank, size):
    state = PowerSGDState(start_powerSGD_iter=3)
    for iteration in range(3):
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, gradients,
                                                   range(size)):
            assert_close(out, mean_of(grads_by_rank), f"iteration {iteration}")
            assert_close(bucket.buffer(), flat(grads_by_rank[rank]), "buffer unchanged")
    assert state.iteration == 3 and not state.q_memory_dict


@pytest.mark.parametrize("r", [1, 2])
def test_low_rank_mean_is_exact(rank, size, r):
    """Mean of rank <= r: P spans its columns, so P Q^T = P P^T mean(M) = mean(G) exactly, and
    the error memory of rank w is the running sum of G_w - mean(G) (the errors sum to zero)."""
    state = PowerSGDState(matrix_approximation_rank=r, start_powerSGD_iter=0)
    running = [torch.zeros(flat(gradients(0, 0, i)).numel(), dtype=torch.float64)
               for i in range(len(BUCKETS))]
    for iteration in range(4):
        make = lambda w, it, i: low_rank_gradients(w, it, i, r)  # noqa: E731
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, make, range(size)):
            index = bucket.index()
            mean = mean_of(grads_by_rank)
            assert_close(out, mean, f"iteration {iteration}, bucket {index}")
            running[index] += flat(grads_by_rank[rank]) - mean
            expected_error = running[index].clone()
            for position, segment in enumerate(segments(index)):
                if not COMPRESSED[index][position]:
                    expected_error[segment] = 0
            assert_close(state.error_dict[index], expected_error, f"error, iteration {iteration}")


def segments(index):
    """The slice of each tensor of bucket `index` in the flat buffer."""
    result, offset = [], 0
    for shape in BUCKETS[index]:
        numel = torch.Size(shape).numel()
        result.append(slice(offset, offset + numel))
        offset += numel
    return result


@pytest.mark.parametrize("r", [1, 2])
def test_error_memory_is_m_minus_pq(rank, size, r):
    """Per compressed matrix: out = P Q^T with Q the state's warm Q and P orthonormal (recovered
    as out Q (Q^T Q)^-1), so rank(out) <= r; the error is G + previous error - out; the
    uncompressed tensors are the exact mean and keep no error."""
    state = PowerSGDState(matrix_approximation_rank=r, start_powerSGD_iter=0)
    previous = {}
    for iteration in range(3):
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, gradients,
                                                   range(size)):
            index = bucket.index()
            mean = mean_of(grads_by_rank)
            m = flat(grads_by_rank[rank]) + previous.get(index, 0)
            error = state.error_dict[index]
            for position, segment in enumerate(segments(index)):
                if not COMPRESSED[index][position]:
                    assert_close(out[segment], mean[segment], "uncompressed tensor")
                    assert torch.count_nonzero(error[segment]) == 0
                    continue
                q = state.q_memory_dict[index][position]
                rows = BUCKETS[index][position][0]
                approximation = out[segment].view(rows, -1)
                p = approximation @ q @ torch.linalg.inv(q.t() @ q)
                assert_close(p.t() @ p, torch.eye(q.shape[1], dtype=p.dtype), "P^T P = I")
                assert_close(approximation, p @ q.t(), "out = P Q^T")
                assert_close(error[segment], m[segment] - out[segment], "error = M - P Q^T")
            previous[index] = error.clone()


def test_iteration_advances_only_on_last_bucket():
    state = PowerSGDState(start_powerSGD_iter=1)
    for expected in range(3):  # iteration 0 averages, 1 and 2 compress
        for index in range(len(BUCKETS)):
            last = index == len(BUCKETS) - 1
            assert state.iteration == expected
            powerSGD_hook(state, FakeBucket(index, gradients(0, expected, index), last)).wait()
            assert state.iteration == expected + (1 if last else 0)


def test_min_compression_rate_sends_everything_plain(rank, size):
    state = PowerSGDState(start_powerSGD_iter=0, min_compression_rate=1000)
    for iteration in range(2):
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, gradients,
                                                   range(size)):
            assert_close(out, mean_of(grads_by_rank), f"iteration {iteration}")
            assert state.q_memory_dict[bucket.index()] == {}
            assert torch.count_nonzero(state.error_dict[bucket.index()]) == 0


def test_zero_gradient_stays_finite_and_recovers(rank, size):
    """A gradient that is zero on every rank: zero out (no NaN with epsilon 0); its warm Q comes
    back zero and is drawn again, so the next, low-rank gradients are averaged exactly."""
    state = PowerSGDState(start_powerSGD_iter=0)

    def make(w, iteration, index):
        grads = low_rank_gradients(w, iteration, index, 1)
        return [torch.zeros_like(g) for g in grads] if iteration == 0 else grads

    for iteration in range(3):
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, make, range(size)):
            assert torch.isfinite(out).all()
            assert_close(out, mean_of(grads_by_rank), f"iteration {iteration}")


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 1e-2)])
def test_low_precision_buckets(rank, size, dtype, tolerance):
    """float32 computes in float32, bfloat16 in float32 and casts back; compared with the float64
    reference on the same (rounded) gradients, relative to the largest entry (measured at 1 to 4
    ranks: at most 8.7e-7 for float32, 3.5e-3 for bfloat16, whose steps are 2**-8 at 1.0)."""
    state = PowerSGDState(start_powerSGD_iter=0, random_seed=3)
    reference = Reference(seed=3)
    for iteration in range(3):
        make = lambda w, it, i: gradients(w, it, i, dtype)  # noqa: E731
        for bucket, out, grads_by_rank in run_hook(state, rank, iteration, make, range(size)):
            assert out.dtype == dtype
            wide = {w: [g.double() for g in grads] for w, grads in grads_by_rank.items()}
            expected, _ = reference.step(bucket.index(), wide)
            error = (out.double() - expected).abs().max().item()
            assert error <= tolerance * max(1.0, expected.abs().max().item()), error


@pytest.mark.parametrize("name,value", [
    ("matrix_approximation_rank", 0), ("start_powerSGD_iter", -1), ("min_compression_rate", -1),
    ("orthogonalization_epsilon", float("nan")), ("random_seed", 1.5)])
def test_bad_arguments_are_refused(name, value):
    with pytest.raises(chorus.InvalidArgumentError, match=name):
        PowerSGDState(**{name: value})
