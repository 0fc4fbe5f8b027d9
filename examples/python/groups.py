"""rank_list example: rank r holds r + 1 and runs allreduce (sum) within the groups of several
rank_lists; rank 0 gathers every rank's result and prints one row per rank_list. Ranks that no
group lists run standalone (a group of one). Then it prints each rank's communicator attributes
for rank_list [[1, 2, 3], [0]].

    build/bin/chorusrun -np 4 /usr/bin/python3 examples/python/groups.py
(with PYTHONPATH=build/python, or chorus installed). On two nodes (one `chorusrun --nnodes 2
--node-rank I --master HOST:PORT --nproc-per-node 2 ...` per node) local_rank/local_size count
the group's members on the caller's node.

Expected on 4 ranks:
    rank_list        | r0 | r1 | r2 | r3
    None             | 10 | 10 | 10 | 10
    [[0, 1, 2, 3]]   | 10 | 10 | 10 | 10
    [[0, 1], [2, 3]] |  3 |  3 |  7 |  7
    [[0, 1, 2], [3]] |  6 |  6 |  6 |  4
    [[0, 1, 2]]      |  6 |  6 |  6 |  4
"""

import sys

import numpy as np

import chorus
import chorus.distributed as dist

RANK_LISTS = [None, [[0, 1, 2, 3]], [[0, 1], [2, 3]], [[0, 1, 2], [3]], [[0, 1, 2]]]


def expected_sum(rank_list, size, rank):
    """Sum of r + 1 over the members of `rank`'s group (a reference loop, not chorus)."""
    if rank_list is None:
        return size * (size + 1) // 2
    for group in rank_list:
        if rank in group:
            return sum(r + 1 for r in group)
    return rank + 1  # in no group: standalone


def seed_table(rank, size):
    if rank == 0:
        print(f"allreduce(sum) of r + 1 within each rank_list's groups ({size} ranks)\n")
        print(f"  {'rank_list':<18} |" + "".join(f" r{r:<2} |" for r in range(size)))
    ok = True
    for rank_list in RANK_LISTS:
        y = chorus.allreduce(np.array([rank + 1], dtype=np.int32), rank_list=rank_list)
        row = chorus.gather(y, root=0)
        if rank == 0:
            print(f"  {str(rank_list):<18} |" + "".join(f" {v:3d} |" for v in row))
            ok = ok and all(row[r] == expected_sum(rank_list, size, r) for r in range(size))
    if rank == 0:
        print(f"\nseed table: {'OK' if ok else 'WRONG'}\n", flush=True)
    return ok


def attribute_table(rank):
    comm = dist.get_communicator(rank_list=[[1, 2, 3], [0]])
    mine = np.array([comm.rank, comm.size, comm.local_rank, comm.local_size, comm.group_id,
                     comm.group_size], dtype=np.int32)
    table = chorus.gather(mine[None, :], root=0)
    if rank == 0:
        print("attributes for rank_list [[1, 2, 3], [0]]\n")
        print("  rank | sub rank/size | local rank/size | group_id/size")
        for r, a in enumerate(table):
            print(f"  {r:4d} | {a[0]:8d}/{a[1]:<4d} | {a[2]:10d}/{a[3]:<4d} | {a[4]:8d}/{a[5]:<4d}")
        sys.stdout.flush()


def main():
    cfg = dist.get_config()
    if cfg.size != 4:
        if cfg.rank == 0:
            print("the groups example needs 4 ranks: chorusrun -np 4 python3 groups.py",
                  file=sys.stderr)
        return 2
    ok = seed_table(cfg.rank, cfg.size)
    attribute_table(cfg.rank)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
