"""A task of a faked srun --mpi=pmix step that initializes MPI (mpi4py) before chorus
(test_slurm.py): chorus must bootstrap through MPI, here a singleton of one rank, not wait for the
other task srun's variables announce."""

from mpi4py import MPI  # initializes MPI before chorus, as under srun --mpi=pmix
import chorus.distributed as dist  # noqa: E402
comm = dist.get_communicator()
print("SIZE", comm.size, "BACKEND", comm.backend, "MPI", MPI.COMM_WORLD.Get_size(), flush=True)
