#!/usr/bin/env bash
# baton-edge --http as a process, spoken to by curl (an OpenAI client's view):
# /v1/models, completions and chat completions (JSON and server-sent events),
# the same text as the gRPC Generate (`baton generate --edge`) for the same
# seed, errors by HTTP code in OpenAI's shape, /metrics on its own address
# (--metrics; the API's address has none), and a clean exit on SIGTERM.
# usage: http_api_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cleanup_signal=KILL

"${bin}/baton" model synth --shape tiny --type f16 -o "${work}/tiny-f16.gguf" > /dev/null
"${bin}/baton" model quantize "${work}/tiny-f16.gguf" "${work}/tiny.gguf" --type q4_0 > /dev/null

start_server baton-edge '.*listening on [^:]*:\([0-9]*\).*' \
  "${bin}/baton-edge" --model "${work}/tiny.gguf" --listen 127.0.0.1:0 --http 127.0.0.1:0 --threads 1 \
  --memory-budget 1GiB --metrics 127.0.0.1:0
pid=${server_pid}
grpc_port=${server_port}
wait_http_port "${work}/baton-edge.log" "${pid}"
base="http://127.0.0.1:${http_port}"

# READY: /health answers 200 (503 with Retry-After before).
code=""
for _ in $(seq 1 300); do
  code=$(curl -s -o "${work}/health.json" -w '%{http_code}' "${base}/health" || true)
  [[ "${code}" == 200 ]] && break
  sleep 0.1
done
[[ "${code}" == 200 ]] || fail "/health never answered 200 (last ${code})"

# /v1/models lists the served model by its one name (GGUF general.name, as Health shows it).
curl -sf "${base}/v1/models" -o "${work}/models.json" || fail "GET /v1/models"
model=$(json_get "${work}/models.json" "d['data'][0]['id']")
[[ "${model}" == baton-synth-tiny ]] || fail "model id '${model}', expected 'baton-synth-tiny'"

# Completion: the same text as the gRPC Generate for the same seed.
prompt="the quick brown fox"
"${bin}/baton" generate --edge "127.0.0.1:${grpc_port}" -p "${prompt}" --seed 7 --temperature 0.9 \
  --max-tokens 10 --policy local --json > "${work}/grpc.json" 2> /dev/null || fail "baton generate --edge"
cat > "${work}/completion.json" << EOF
{"model": "${model}", "prompt": "${prompt}", "seed": 7, "temperature": 0.9, "max_tokens": 10,
 "baton": {"policy": "local"}}
EOF
curl -sf "${base}/v1/completions" -H 'Content-Type: application/json' --data-binary @"${work}/completion.json" \
  -o "${work}/answer.json" || fail "POST /v1/completions"
grpc_text=$(json_get "${work}/grpc.json" "repr(d['text'])")
http_text=$(json_get "${work}/answer.json" "repr(d['choices'][0]['text'])")
[[ "${grpc_text}" == "${http_text}" ]] || fail "HTTP text ${http_text} != gRPC text ${grpc_text}"
[[ $(json_get "${work}/answer.json" "d['usage']['completion_tokens']") == \
   $(json_get "${work}/grpc.json" "d['stats'].get('generatedTokens', d['stats'].get('generated_tokens', 0))") ]] \
  || fail "usage.completion_tokens differs from the gRPC stats"

# The same request streamed: SSE events read by curl -N, ending with [DONE].
"${python}" -c "import json,sys; d=json.load(open(sys.argv[1])); d['stream']=True; print(json.dumps(d))" \
  "${work}/completion.json" > "${work}/stream.json"
curl -sN "${base}/v1/completions" -H 'Content-Type: application/json' --data-binary @"${work}/stream.json" \
  > "${work}/stream.txt" || fail "streamed POST /v1/completions"
[[ $(grep -c '^data: ' "${work}/stream.txt") -ge 2 ]] || fail "no SSE events: $(cat "${work}/stream.txt")"
[[ $(grep '^data: ' "${work}/stream.txt" | tail -1) == "data: [DONE]" ]] || fail "stream does not end with [DONE]"
stream_text=$("${python}" - "${work}/stream.txt" << 'EOF'
import json, sys
text = ""
for line in open(sys.argv[1]):
    if line.startswith("data: ") and line.strip() != "data: [DONE]":
        chunk = json.loads(line[6:])
        text += "".join(c.get("text", "") for c in chunk["choices"])
print(repr(text))
EOF
)
[[ "${stream_text}" == "${grpc_text}" ]] || fail "streamed text ${stream_text} != gRPC text ${grpc_text}"

# Chat completion, streamed.
curl -sN "${base}/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5, "stream": true}' \
  > "${work}/chat.txt" || fail "POST /v1/chat/completions"
grep -q '"role":"assistant"' "${work}/chat.txt" || fail "no assistant role chunk: $(cat "${work}/chat.txt")"
[[ $(grep '^data: ' "${work}/chat.txt" | tail -1) == "data: [DONE]" ]] || fail "chat stream does not end with [DONE]"

# Errors: code and OpenAI shape.
expect_error() {  # CODE TYPE PATH BODY_FILE
  local got
  got=$(curl -s -o "${work}/error.json" -w '%{http_code}' "${base}$3" -H 'Content-Type: application/json' \
    --data-binary @"$4")
  [[ "${got}" == "$1" ]] || fail "$3: HTTP ${got}, expected $1: $(cat "${work}/error.json")"
  [[ $(json_get "${work}/error.json" "d['error']['type']") == "$2" ]] || fail "$3: error type, body $(cat "${work}/error.json")"
}
printf '{"prompt": ' > "${work}/bad.json"
expect_error 400 invalid_request_error /v1/completions "${work}/bad.json"
# A field the server cannot honour is refused by name, never a silent 200.
printf '{"model": "gpt-4", "prompt": "hi", "tools": [{"type": "function", "function": {"name": "f"}}]}' \
  > "${work}/tools.json"
expect_error 400 invalid_request_error /v1/completions "${work}/tools.json"
[[ $(json_get "${work}/error.json" "d['error']['param']") == tools ]] || fail "param is not 'tools': $(cat "${work}/error.json")"
"${python}" -c "print('{\"prompt\": \"' + 'x' * (9 << 20) + '\"}')" > "${work}/big.json"
expect_error 413 invalid_request_error /v1/completions "${work}/big.json"

# Metrics: the calls above, in Prometheus text, on the --metrics address only.
metrics_port=$(sed -n 's/.*metrics on port \([0-9]*\).*/\1/p' "${work}/baton-edge.log" | head -1)
[[ -n "${metrics_port}" ]] || fail "no metrics port in the log"
code=$(curl -s -o /dev/null -w '%{http_code}' "${base}/metrics" || true)
[[ "${code}" == 404 ]] || fail "the API's address serves /metrics (${code})"
curl -sf "http://127.0.0.1:${metrics_port}/metrics" -o "${work}/metrics.txt" || fail "GET /metrics"
grep -q '^baton_edge_generate_total{outcome="ok"} [1-9]' "${work}/metrics.txt" || fail "no ok Generate in /metrics"
grep -q '^# TYPE baton_edge_ttft_seconds histogram' "${work}/metrics.txt" || fail "no TTFT histogram"
grep -q '^baton_edge_ready 1' "${work}/metrics.txt" || fail "baton_edge_ready is not 1"

stop_server "${pid}"
[[ ${stop_status} -eq 0 ]] || fail "exit code ${stop_status} after SIGTERM"
echo "http api test: ok"
