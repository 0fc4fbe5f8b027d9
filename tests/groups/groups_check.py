"""groups_check.py: the rank_list contract of the chorus Python package on 4 real ranks.

    chorusrun -np 4 /usr/bin/python3 groups_check.py          (one node)
    groups_check.py --nodes 2                                  (2 simulated nodes; two_nodes.py)

Checks the seed grouping table, the attribute table of [[1, 2, 3], [0]], allgather and
reduce_scatter within groups (closed forms), argument errors (ValueError), and the communicator
cache (same object, no new rendezvous). Each rank prints its values and counts its failures; rank 0
prints "groups_check.py: PASSED" only when the world-wide count is zero. Exit status 0 = passed.
"""

import sys

import numpy as np

import chorus
import chorus.distributed as dist

SEED_TABLE = [  # rank r holds r + 1; allreduce(sum) within the groups
    (None, [10, 10, 10, 10]),
    ([[0, 1, 2, 3]], [10, 10, 10, 10]),
    ([[0, 1], [2, 3]], [3, 3, 7, 7]),
    ([[0, 1, 2], [3]], [6, 6, 6, 4]),
    ([[0, 1, 2]], [6, 6, 6, 4]),  # rank 3 in no group: standalone
]
ATTRIBUTE_RANK_LIST = [[1, 2, 3], [0]]
# (rank, size, local_rank, local_size, group_id, group_size) per world rank.
TWO_NODE_ATTRIBUTES = [(0, 1, 0, 1, 1, 2), (0, 3, 0, 1, 0, 2), (1, 3, 0, 2, 0, 2),
                       (2, 3, 1, 2, 0, 2)]
ONE_NODE_ATTRIBUTES = [(0, 1, 0, 1, 1, 2), (0, 3, 0, 3, 0, 2), (1, 3, 1, 3, 0, 2),
                       (2, 3, 2, 3, 0, 2)]

failures = 0
me = 0


def check(ok, what):
    global failures
    if not ok:
        failures += 1
        print(f"FAIL rank {me}: {what}", flush=True)


def group_of(rank_list, rank):
    """Members of `rank`'s group in group order; unlisted ranks stand alone."""
    for group in rank_list:
        if rank in group:
            return group
    return [rank]


def check_seed_table():
    for rank_list, sums in SEED_TABLE:
        y = chorus.allreduce(np.array([me + 1], dtype=np.int32), rank_list=rank_list)
        print(f"seed rank {me} rank_list {rank_list} -> {int(y[0])} (expected {sums[me]})")
        check(y.shape == (1,) and int(y[0]) == sums[me], f"seed table row {rank_list}")


def check_attributes(nodes):
    comm = dist.get_communicator(rank_list=ATTRIBUTE_RANK_LIST)
    got = (comm.rank, comm.size, comm.local_rank, comm.local_size, comm.group_id,
           comm.group_size)
    expected = (TWO_NODE_ATTRIBUTES if nodes == 2 else ONE_NODE_ATTRIBUTES)[me]
    print(f"attributes rank {me}: {got} (expected {expected})")
    check(got == expected, "attribute table")
    check(comm.world_rank == me and comm.world_size == 4, "world rank/size")
    check(comm.root_rank == group_of(ATTRIBUTE_RANK_LIST, me)[0], "root_rank")


def check_data_movement(rank_list):
    """allgather: member m contributes [100m, 100m + 1], gathered in group order.
    reduce_scatter: member m contributes x[j] = 10m + j (j < 2n); sub rank s gets rows 2s, 2s + 1
    summed: 10 * sum(members) + n * (2s + k)."""
    members = group_of(rank_list, me)
    n = len(members)
    comm = dist.get_communicator(rank_list=rank_list)
    check(comm.members == tuple(members), f"members of {rank_list}")
    gathered = chorus.allgather(np.array([100 * me, 100 * me + 1], dtype=np.int64),
                                rank_list=rank_list)
    expected = np.array([v for m in members for v in (100 * m, 100 * m + 1)], dtype=np.int64)
    check(np.array_equal(gathered, expected), f"allgather within {rank_list}: {gathered}")
    x = 10.0 * me + np.arange(2 * n, dtype=np.float64)
    chunk = chorus.reduce_scatter(x, rank_list=rank_list)
    s = members.index(me)
    expected = 10.0 * sum(members) + n * (2.0 * s + np.arange(2))
    check(np.array_equal(chunk, expected), f"reduce_scatter within {rank_list}: {chunk}")
    print(f"data movement rank {me} rank_list {rank_list}: allgather/reduce_scatter checked")


def expect_value_error(fn, needle, what):
    try:
        fn()
    except ValueError as e:
        check(isinstance(e, chorus.InvalidArgumentError), f"{what}: {type(e).__name__}")
        check(needle in str(e), f"{what}: message lacks {needle!r}: {e}")
    else:
        check(False, f"{what}: no error")


def check_errors():
    """Every rank makes the same bad calls; each fails on the caller before any communication."""
    x = np.ones(2, dtype=np.float32)
    once = "Each rank can only appear on rank_list once"
    expect_value_error(lambda: chorus.allreduce(x, rank_list=[[0, 1], [1, 2]]), once,
                       "rank in two groups")
    expect_value_error(lambda: dist.get_communicator(rank_list=[[0, 1], [1, 2]]), once,
                       "get_communicator, rank in two groups")
    expect_value_error(lambda: chorus.allreduce(x, rank_list=[[0, 4]]), "rank 4",
                       "rank 4 of 4")
    expect_value_error(lambda: chorus.allreduce(x, rank_list=[[-1, 0]]), "rank -1", "rank -1")
    expect_value_error(lambda: chorus.allreduce(x, rank_list=[[0, 1], []]), "non-empty",
                       "empty group")
    pairs = [[0, 1], [2, 3]]
    outside = 2 if me < 2 else 0  # a world rank of the other pair
    expect_value_error(lambda: chorus.broadcast(x, root=outside, rank_list=pairs),
                       "not a member", "broadcast root outside the group")
    expect_value_error(lambda: chorus.reduce(x, root=outside, rank_list=pairs), "not a member",
                       "reduce root outside the group")
    expect_value_error(lambda: chorus.gather(x, root=7, rank_list=pairs), "not a member",
                       "gather root 7")
    print(f"errors rank {me}: checked")


def check_cache():
    """The same rank_list gives the same object (Python wrapper and C++ communicator). Rank 0
    alone then asks again: a rendezvous would need the other ranks (and would put a split on the
    world communicator, which the world barrier below would reject), so returning shows none."""
    pairs = [[0, 1], [2, 3]]
    first = dist.get_communicator(rank_list=pairs)
    check(dist.get_communicator(rank_list=[[0, 1], [2, 3]]) is first, "same rank_list, same object")
    check(dist.get_communicator(rank_list=[[0, 1, 2]])
          is dist.get_communicator(rank_list=[[0, 1, 2], [3]]), "[[0,1,2]] is [[0,1,2],[3]]")
    check(dist.get_communicator(rank_list=[[0, 1, 2, 3]]) is dist.get_communicator(),
          "the whole world in order is the world communicator")
    check(dist.get_communicator() is dist.get_communicator(), "the world is cached")
    # The C++ pool hands back the very communicator the Python cache wraps.
    check(chorus._chorus.communicator(pairs) is first._native, "C++ pool returns the same object")
    if me == 0:
        for _ in range(3):
            check(dist.get_communicator(rank_list=pairs) is first, "non-collective cached lookup")
            check(chorus._chorus.communicator(pairs) is first._native, "non-collective C++ lookup")
    chorus.barrier()
    print(f"cache rank {me}: checked")


def main():
    global me
    nodes = int(sys.argv[2]) if len(sys.argv) == 3 and sys.argv[1] == "--nodes" else 1
    cfg = dist.get_config()
    me = cfg.rank
    if cfg.size != 4:
        print(f"FAIL rank {me}: groups_check.py needs 4 ranks, got {cfg.size}", flush=True)
        return 2
    check_seed_table()
    check_attributes(nodes)
    check_data_movement([[0, 1], [2, 3]])
    check_data_movement([[3, 1, 2], [0]])  # group order differs from rank order
    check_data_movement([[0, 1, 2]])  # rank 3 standalone
    check_errors()
    check_cache()
    total = int(chorus.allreduce(np.array([failures], dtype=np.int32))[0])
    if me == 0 and total == 0:
        print(f"groups_check.py: PASSED on 4 ranks, {nodes} node(s)")
    sys.stdout.flush()
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
