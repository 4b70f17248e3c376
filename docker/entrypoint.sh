#!/bin/sh
# The container's start (tini runs it as PID 1's only child): the example job files onto the volume the first
# time, then the command, the web UI by default. `docker stop` (SIGTERM) first stops every running job of the
# workspace as Abort does -- SIGTERM, SIGKILL after its grace period, a check that no process is left -- so a run
# ends "aborted", not cut off; then the command.
cp -rn /opt/zeroboard/examples /data/ 2>/dev/null
"$@" <&0 &  # stdin kept: `docker run -it zeroboard bash` works too
child=$!
trap 'zeroboard stop --all; kill -TERM "$child" 2>/dev/null' TERM INT
wait "$child"
status=$?
while kill -0 "$child" 2>/dev/null; do  # the trap interrupted the wait: wait for the command itself
    wait "$child"
    status=$?
done
exit "$status"
