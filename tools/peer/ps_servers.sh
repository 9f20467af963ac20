# Sourced by compare_dense.sh and compare_sparse.sh: fresh ps_server
# processes for one case. Needs PS_SERVER (the binary) and OUT (a folder);
# writes OUT/token once, OUT/port<i> and OUT/ps_server<i>.log.
#   start_servers N   starts N servers and sets `servers` to their
#                     addresses, comma-separated (call it directly, not in
#                     a command substitution: its subshell would keep the
#                     pids from stop_servers, and the servers would outlive
#                     the script)
#   stop_servers      stops them (also on exit)
umask 077
[[ -s $OUT/token ]] || head -c 24 /dev/urandom | base64 >"$OUT/token"
pids=()
stop_servers() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  pids=()
}
trap stop_servers EXIT
start_servers() {
  local i addrs=()
  for ((i = 0; i < $1; i++)); do
    rm -f "$OUT/port$i"
    "$PS_SERVER" --port=0 --port_file="$OUT/port$i" --token_file="$OUT/token" \
      >>"$OUT/ps_server$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < $1; i++)); do
    for _ in $(seq 200); do [[ -s $OUT/port$i ]] && break; sleep 0.1; done
    addrs+=("127.0.0.1:$(tr -d '[:space:]' <"$OUT/port$i")")
  done
  servers=$(IFS=,; echo "${addrs[*]}")
}
