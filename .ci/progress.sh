#!/usr/bin/env bash
# progress.sh WHAT COMMAND...: says WHAT is under way, runs COMMAND, and
# while it runs says every 15 s how long it has taken, so a first build
# (several minutes of compiling on a cold cache, silent otherwise) does
# not look hung. Exits with COMMAND's status.
set -u
what=$1
shift
echo "$what"
start=$SECONDS
"$@" &
pid=$!
trap 'kill "$pid" 2>/dev/null' INT TERM
while kill -0 "$pid" 2>/dev/null; do
  for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15; do
    sleep 1
    kill -0 "$pid" 2>/dev/null || break 2
  done
  echo "  … still at it: $((SECONDS - start)) s"
done
wait "$pid"
status=$?
[ "$status" -eq 0 ] && [ $((SECONDS - start)) -ge 15 ] && echo "  done in $((SECONDS - start)) s"
exit "$status"
