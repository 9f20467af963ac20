#!/usr/bin/env bash
# Mutual TLS end to end: throwaway certificates made with openssl at test
# time (a CA; a node certificate for localhost / 127.0.0.1 used by every
# daemon as server and client identity; a rogue CA's certificate). A local
# cluster started by `psctl --tls_* cluster up` (coordinator, 1 shard, 2 CPU
# workers, all traffic over mutual TLS) trains a small job to SUCCEEDED.
# Refused: a plaintext client, a TLS client without a certificate and a
# client whose certificate another CA signed -- at the coordinator (psctl)
# and at the shard (openssl s_client).
set -uo pipefail
R="${TEST_SRCDIR}/ps"
RUN="${TEST_TMPDIR}/cluster"
C="${TEST_TMPDIR}/certs"
T="$TEST_TMPDIR"
mkdir -p "$C"
tls=(--tls_cert "$C/node.pem" --tls_key "$C/node.key" --tls_ca "$C/ca.pem")
psctl() { "$R/tools/psctl/psctl" --run_dir "$RUN" --timeout 20 "$@"; }
dump_logs() { for f in "$RUN"/logs/*.log; do echo "=== $f"; tail -n 20 "$f"; done; }
trap 'psctl "${tls[@]}" cluster down >/dev/null 2>&1 || true' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

command -v openssl >/dev/null || { echo "FAIL: openssl not installed"; exit 1; }
mkcert() {  # mkcert NAME CA_NAME SUBJECT [EXTFILE]
  openssl req -newkey rsa:2048 -nodes -keyout "$C/$1.key" -subj "/CN=$3" \
    -out "$C/$1.csr" 2>/dev/null &&
    openssl x509 -req -in "$C/$1.csr" -CA "$C/$2.pem" -CAkey "$C/$2.key" \
      -CAcreateserial -days 1 -out "$C/$1.pem" ${4:+-extfile "$4"} 2>/dev/null
}
for ca in ca rogue_ca; do
  openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=ps test $ca" \
    -keyout "$C/$ca.key" -out "$C/$ca.pem" 2>/dev/null ||
    { echo "FAIL: openssl could not make $ca"; exit 1; }
done
cat >"$C/node.ext" <<'EOT'
subjectAltName = DNS:localhost, IP:127.0.0.1
extendedKeyUsage = serverAuth, clientAuth
EOT
mkcert node ca localhost "$C/node.ext" && mkcert rogue rogue_ca localhost "$C/node.ext" ||
  { echo "FAIL: openssl could not sign the certificates"; exit 1; }
chmod 600 "$C"/*.key

psctl "${tls[@]}" cluster up --servers 1 --workers 2 --device cpu --bin_dir "$R" ||
  { dump_logs; echo "FAIL: cluster up over mutual TLS"; exit 1; }
grep -q -- "--tls_ca" /proc/"$(cat "$RUN/pids/worker-0.pid")"/cmdline ||
  fail "the worker was not started with the TLS flags"

cat >"$T/job.pbtxt" <<'EOT'
name: "mtls"
model { mlp { input_dim: 784 hidden: 32 num_classes: 10 } }
optimizer { learning_rate: 0.1 }
data { batch_size: 64 max_steps: 60 eval_every_steps: 30 eval_examples: 1000 }
num_workers: 2
EOT
if psctl "${tls[@]}" submit "$T/job.pbtxt" --wait >"$T/out" 2>&1; then
  echo "ok: job over mutual TLS: $(grep -o 'SUCCEEDED.*' "$T/out" | head -n1)"
else
  cat "$T/out"; dump_logs; fail "the job over mutual TLS did not succeed"
fi

# The coordinator refuses what is not mutual TLS with our CA (exit 3:
# unreachable, the handshake never completes).
refused() {  # refused DESCRIPTION -- psctl args...
  local what=$1; shift 2
  psctl "$@" list >"$T/out" 2>&1; local rc=$?
  if [[ $rc == 3 ]]; then echo "ok: coordinator refuses $what"; else
    cat "$T/out"; fail "coordinator accepted $what (exit $rc)"; fi
}
refused "a plaintext client" --
refused "a TLS client without a certificate" -- --tls_ca "$C/ca.pem"
refused "a certificate from another CA" -- --tls_cert "$C/rogue.pem" \
  --tls_key "$C/rogue.key" --tls_ca "$C/ca.pem"
psctl "${tls[@]}" list >/dev/null || fail "a client with a valid certificate was refused"

# The shard: a TLS handshake without a client certificate fails; with the
# node certificate it verifies.
port=$(tr -d '[:space:]' <"$RUN/ports/server-0.port")
if timeout 10 openssl s_client -connect "127.0.0.1:$port" -CAfile "$C/ca.pem" \
    -alpn h2 </dev/null >"$T/s_client" 2>&1 && grep -q "^    Protocol *: TLS" "$T/s_client" &&
    ! grep -qi "alert\|error" "$T/s_client"; then
  cat "$T/s_client"; fail "the shard completed a session without a client certificate"
else
  echo "ok: shard refuses a TLS client without a certificate"
fi
timeout 10 openssl s_client -connect "127.0.0.1:$port" -CAfile "$C/ca.pem" \
  -cert "$C/node.pem" -key "$C/node.key" -alpn h2 </dev/null >"$T/s_client" 2>&1
grep -q "Verify return code: 0 (ok)" "$T/s_client" ||
  { cat "$T/s_client"; fail "the shard's certificate did not verify against the CA"; }
# A plaintext HTTP/2 preface to the shard gets no HTTP/2 answer (the server
# may also just reset the connection: run in a subshell, SIGPIPE included).
reply=$( (exec 3<>"/dev/tcp/127.0.0.1/$port" &&
  printf 'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' >&3 &&
  timeout 3 head -c 9 <&3) 2>/dev/null | od -An -tx1 | tr -d ' \n')
# A SETTINGS frame would be 3 length bytes, then type 0x04.
if [[ ${reply:6:2} == 04 ]]; then
  fail "the shard answered a plaintext HTTP/2 client"
else
  echo "ok: shard gives a plaintext client no HTTP/2 session (got '${reply}')"
fi

((fails == 0)) || { dump_logs; echo "$fails failure(s)"; exit 1; }
echo "PASS"
