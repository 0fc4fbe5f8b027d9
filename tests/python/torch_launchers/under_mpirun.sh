#!/bin/sh
# Runs PROGRAM on 3 ranks under mpirun (loopback only) as a torch user would: RANK and WORLD_SIZE
# from Open MPI's variables, MASTER_ADDR and a free MASTER_PORT for torch's env:// store.
#   under_mpirun.sh MPIRUN PYTHON PROGRAM
set -eu
mpirun=$1 python=$2 program=$3
port=$("$python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
exec "$mpirun" --allow-run-as-root --oversubscribe --mca btl self,vader \
  --mca oob_tcp_if_include lo --mca btl_tcp_if_include lo \
  -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT="$port" -np 3 \
  sh -c 'RANK=$OMPI_COMM_WORLD_RANK WORLD_SIZE=$OMPI_COMM_WORLD_SIZE exec "$0" "$1"' "$python" "$program"
