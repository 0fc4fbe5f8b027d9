#!/bin/sh
# `chorusrun --launcher mpi` end to end: two /bin/sh ranks print OMPI_COMM_WORLD_RANK through
# mpirun (on loopback), placed by -np, by an Open MPI hostfile and by an MPICH one; a rank's exit
# status comes back as chorusrun's; a bad hostfile is refused naming its line.
# Usage: mpi_launcher_test.sh CHORUSRUN. Exits non-zero, saying why, on failure.
set -u
chorusrun=$1
export OMPI_MCA_btl=self,vader OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_btl_tcp_if_include=lo
fail() { echo "FAIL: $*" >&2; exit 1; }

out=$(timeout -s KILL 60 "$chorusrun" --launcher mpi -np 2 /bin/sh -c \
  'echo "rank=$OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE"') || fail "chorusrun exited $?"
sorted=$(printf '%s\n' "$out" | sort)
expected=$(printf 'rank=0 of 2\nrank=1 of 2')
[ "$sorted" = "$expected" ] || fail "expected the lines '$expected', got '$out'"

dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
printf '# Open MPI format\nlocalhost slots=2\n' >"$dir/openmpi"
printf '# MPICH format\nlocalhost:2\n' >"$dir/mpich"
for format in openmpi mpich; do
  out=$(timeout -s KILL 60 "$chorusrun" --launcher mpi --hostfile "$dir/$format" /bin/sh -c \
    'echo "rank=$OMPI_COMM_WORLD_RANK of $OMPI_COMM_WORLD_SIZE"') ||
    fail "chorusrun with the $format hostfile exited $?"
  sorted=$(printf '%s\n' "$out" | sort)
  [ "$sorted" = "$expected" ] || fail "$format hostfile: expected '$expected', got '$out'"
done

printf 'localhost:2\nlocalhost slots=two\n' >"$dir/bad"
err=$(timeout -s KILL 60 "$chorusrun" --launcher mpi --hostfile "$dir/bad" /bin/true 2>&1)
status=$?
[ "$status" = 2 ] || fail "a bad hostfile made chorusrun exit $status, not 2"
case "$err" in *"hostfile line 2"*) ;; *) fail "the bad hostfile error does not name line 2: $err" ;; esac

timeout -s KILL 60 "$chorusrun" --launcher mpi -np 2 /bin/sh -c \
  '[ "$OMPI_COMM_WORLD_RANK" = 1 ] && exit 3; exit 0' 2>/dev/null
status=$?
[ "$status" = 3 ] || fail "a rank exiting 3 made chorusrun exit $status, not 3"
echo "PASS"
