#!/usr/bin/env bash
# Figures for issue 15 item 2 (not a ctest: it is named *_figures.sh): how long
# a normal client waits while another client holds a stream and stops reading.
#   bash tests/e2e/slow_reader_figures.sh BIN_DIR MODEL_Q4_0 [CAP_S]
# BIN_DIR holds baton-edge, baton-prefill and baton (e.g. the base commit's
# build/bin for "before", this tree's for "after"). The stalled client is a raw
# HTTP/2 client on a real socket (python3, standard library only) that grants a
# 16-byte flow-control window and never opens it. The other client is the
# `baton` CLI (a 4-token `generate --edge`; a `pack build --cloud` on a cloud
# with --max-running 1), killed after CAP_S seconds (default 60).
set -uo pipefail
bin=$1 model=$2 cap=${3:-60}
work=$(mktemp -d)
trap 'kill -9 $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

cat > "$work/stall.py" <<'EOF'
# stall.py PORT PATH HEX_REQUEST: calls PATH with the serialized request, then holds the stream unread.
import socket, struct, sys, time
port, path, body = int(sys.argv[1]), sys.argv[2], bytes.fromhex(sys.argv[3])
def frame(kind, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload
def literal(name, value):  # HPACK literal without indexing, new name, no Huffman (lengths < 127)
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value
s = socket.create_connection(("127.0.0.1", port))
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, struct.pack(">HI", 2, 0) + struct.pack(">HI", 4, 16)))
buf = b""
while True:  # acknowledge the server's SETTINGS
    while len(buf) < 9: buf += s.recv(65536)
    n = int.from_bytes(buf[:3], "big")
    while len(buf) < 9 + n: buf += s.recv(65536)
    kind, flags, buf = buf[3], buf[4], buf[9 + n:]
    if kind == 4 and not flags & 1: break
s.sendall(frame(4, 1, 0, b""))
headers = b"".join(literal(k, v) for k, v in [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.encode()),
    (b":authority", b"127.0.0.1:%d" % port), (b"content-type", b"application/grpc"), (b"te", b"trailers")])
s.sendall(frame(1, 4, 1, headers) + frame(0, 1, 1, b"\x00" + struct.pack(">I", len(body)) + body))
time.sleep(3600)  # never reads, never sends WINDOW_UPDATE
EOF

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_ready() {  # $1: --edge|--cloud, $2: address
  for _ in $(seq 600); do
    "$bin/baton" health "$1" "$2" 2>/dev/null | grep -q READY && return 0
    sleep 0.1
  done
  echo "server at $2 never READY" >&2; exit 1
}
# Protobuf varint / fields, enough for the two requests.
varint() { python3 -c "import sys; v=int(sys.argv[1]); o=b''
while v>127: o+=bytes([v&127|128]); v>>=7
print((o+bytes([v])).hex())" "$1"; }
field_bytes() { local hex=$2; echo "$(varint $(( ($1 << 3) | 2 )))$(varint $(( ${#hex} / 2 )))$hex"; }
field_varint() { echo "$(varint $(( $1 << 3 )))$(varint "$2")"; }
seconds_now() { date +%s.%N; }
# Runs the other client ("$@"), killed after $cap s; prints "<seconds> <exit code>".
timed() {
  local start end rc
  start=$(seconds_now)
  timeout "$cap" "$@" > "$work/other.out" 2>&1
  rc=$?
  end=$(seconds_now)
  echo "$(echo "$end - $start" | bc) $rc"
}
report() {  # $1: what, $2: "<seconds> <exit code>"
  set -- "$1" $2
  printf '%s waited %.2f s, exit %d%s\n' "$1" "$2" "$3" "$([[ $3 == 124 ]] && echo " (killed after ${cap}s: not served)")"
}

# ---- edge: a 300-token greedy Generate, progress on, never read ----
edge_port=$(free_port)
"$bin/baton-edge" --model "$model" --listen "127.0.0.1:$edge_port" --threads 1 --policy local \
  > "$work/edge.log" 2>&1 &
wait_ready --edge "127.0.0.1:$edge_port"
text=$(printf 'And it came to pass' | xxd -p | tr -d '\n')
sampling="0d00000000"  # SamplingParams.temperature (field 1, float) = 0: greedy
request="$(field_bytes 1 "$text")$(field_bytes 5 "$sampling")$(field_varint 6 2)$(field_varint 7 300)$(field_varint 9 1)"
other=("$bin/baton" generate --edge "127.0.0.1:$edge_port" -p "And God said" --max-tokens 4 --temperature 0 --policy local)
report "edge:  the other client (4-token generate), alone," "$(timed "${other[@]}")"
python3 "$work/stall.py" "$edge_port" /baton.v1.Edge/Generate "$request" &
sleep 1
report "edge:  the other client (4-token generate), 1 s after the stalled one," "$(timed "${other[@]}")"

# ---- cloud: --max-running 1, a Prefill of 256 tokens in 1-token blocks, never read ----
cloud_port=$(free_port)
"$bin/baton-prefill" --model "$model" --listen "127.0.0.1:$cloud_port" --threads 1 --max-running 1 \
  > "$work/cloud.log" 2>&1 &
wait_ready --cloud "127.0.0.1:$cloud_port"
ids=$(python3 -c "print(''.join(bytes([v & 127 | 128, v >> 7]).hex() if v > 127 else bytes([v]).hex()
              for v in (3 + (i * 37) % 500 for i in range(256))))")
request="$(field_bytes 1 "$(field_bytes 1 "$ids")")$(field_varint 8 1)"
other=("$bin/baton" pack build --cloud "127.0.0.1:$cloud_port" -p "In the beginning" --id figures --out "$work/f.batonkv")
report "cloud: the other client (pack build), alone," "$(timed "${other[@]}")"
python3 "$work/stall.py" "$cloud_port" /baton.v1.Prefill/Prefill "$request" &
sleep 1
report "cloud: the other client (pack build, --max-running 1), 1 s after the stalled one," "$(timed "${other[@]}")"
grep -h "no write progress" "$work/edge.log" "$work/cloud.log" | sed 's/^/log: /'
