#!/bin/sh
# A stand-in for ssh in tests (CHORUS_RSH="/bin/sh fake_ssh.sh"): drops the host argument and runs
# the remote command locally the way sshd would, through a shell (so the command must be quoted as
# for real ssh). stdin, stdout and stderr pass through like ssh's.
#
# FAKE_SSH_DETACH=1 also acts like real ssh without a terminal towards signals: the "remote" command
# runs in a session of its own, so a signal to this process does not reach it.
shift
if [ -n "$FAKE_SSH_DETACH" ]; then
  exec 3<&0  # A background command's stdin would otherwise be /dev/null.
  setsid /bin/sh -c "$*" <&3 3<&- &
  wait $!
  exit $?
fi
exec /bin/sh -c "$*"
