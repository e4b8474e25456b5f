#!/usr/bin/env bash
# `baton bench split` smoke test on a tiny synthetic model (edge: Q4_0, cloud:
# its F16 source): two prompt lengths, --json checked for every field the
# tables need (present, positive, two lengths x three profiles), the modeled
# split TTFT recomputed from the measured parts, wire bytes growing with the
# prompt; a bad profile name fails with one line; --plot writes a PNG when
# gnuplot is installed (skipped with a message otherwise). Then --codec auto
# with a calibration of the cloud model (quality table of int8, int4 and
# tc-b2): every codec measured cloud-only, the auto rows name a measured
# codec within the floor, their TTFT is the overlapped plan of that codec and
# the gains are the stated ratios (not that auto beats local: the policy
# predicts, the bench measures, and on a busy machine they differ).
# Early tokens (default --early-tokens 4, the baseline codec): every length
# and profile has the rows, the cloud sent K tokens, the early TTFT and
# "decoded here" are the stated model of the measured parts, the ratio is
# plain / early, and on the slowest profile (a 100 kbit/s link added for it)
# the early token comes before the plain split's first token; --early-tokens
# 0 drops the rows and 65 fails with one line.
# usage: bench_split_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
baton="${bin}/baton"
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

"${baton}" model synth --shape tiny --type f16 --seed 11 -o "${work}/tiny-f16.gguf" > /dev/null
"${baton}" model quantize "${work}/tiny-f16.gguf" "${work}/tiny-q4.gguf" --type q4_0 > /dev/null
profiles="${src}/deploy/wan/profiles"

common=(bench split --model "${work}/tiny-q4.gguf" --cloud-model "${work}/tiny-f16.gguf" --prompt-lens "64,128"
        --decode-tokens 4 --profiles-file "${profiles}")
"${baton}" "${common[@]}" --json > "${work}/split.json" 2> "${work}/split.err" \
  || fail "bench split --json failed: $(tail -5 "${work}/split.err")"

"${python}" - "${work}/split.json" << 'EOF' || fail "bench split --json checks (above)"
import json, sys
d = json.load(open(sys.argv[1]))
def check(cond, what):
    if not cond:
        print("check failed:", what, file=sys.stderr)
        sys.exit(1)
check(d["cloud_backend"] == "cpu", "cloud backend")
check("not emulated" in d["link_model"], "the link model says it is modeled")
check("PROJECTION" in d["projection_note"], "projection labelled")
lengths = d["lengths"]
check([r["prompt_len"] for r in lengths] == [64, 128], "two prompt lengths in order")
positive = ["local_prefill_ms", "local_last_token_ms", "local_ttft_ms", "cloud_ms", "cloud_prefill_ms",
            "first_block_ms", "receive_ms", "ingest_ms", "split_last_token_ms", "loopback_split_ttft_ms",
            "wire_bytes", "quantized_bytes", "decode_tok_per_s_mean", "decode_p99_ms", "decode_tok_per_s_p99",
            "projection_gpu_prefill_tok_per_s"]
for r in lengths:
    for key in positive:
        check(key in r and r[key] > 0, f"prompt {r['prompt_len']}: {key} = {r.get(key)} must be > 0")
    check(r["local_ttft_ms"] >= r["local_prefill_ms"], "local TTFT covers its prefill")
    check(r["decode_tok_per_s_p99"] <= r["decode_tok_per_s_mean"] * 1.0001, "p99 tok/s not above the mean")
# 63 then 127 tokens streamed: about twice the bytes.
ratio = lengths[1]["wire_bytes"] / lengths[0]["wire_bytes"]
check(1.6 < ratio < 2.4, f"wire bytes ratio {ratio:.2f} for 127 vs 63 tokens")
names = [p["name"] for p in d["profiles"]]
check(names == ["fiber", "wifi", "4g"], f"default profiles {names}")
for p in d["profiles"]:
    check(p["bandwidth_bytes_per_s"] > 0 and p["rtt_ms"] > 0 and p["loss"] == 0, f"{p['name']} link figures")
    check(len(p["rows"]) == 2 and p["crossover"] and p["projection_crossover"], f"{p['name']} rows and crossovers")
    for row, r in zip(p["rows"], lengths):
        for key in ["local_ttft_ms", "split_ttft_ms", "wire_bytes", "decode_tok_per_s_mean",
                    "decode_tok_per_s_p99", "projection_split_ttft_ms"]:
            check(row[key] > 0, f"{p['name']} {row['prompt_len']}: {key} must be > 0")
        transfer_ms = r["wire_bytes"] / p["bandwidth_bytes_per_s"] * 1000
        expect = p["rtt_ms"] + max(r["cloud_ms"], r["first_block_ms"] + transfer_ms) + r["ingest_ms"] + \
            r["split_last_token_ms"]
        check(abs(row["split_ttft_ms"] - expect) <= 1e-3 * expect + 1e-3,
              f"{p['name']} {row['prompt_len']}: split TTFT {row['split_ttft_ms']} != model {expect}")
        check(row["winner"] == ("split" if row["split_ttft_ms"] < row["local_ttft_ms"] else "local"), "winner")
        check(row["projection_split_ttft_ms"] >= p["rtt_ms"], "projection pays the RTT")
# Slower links never make the split faster.
split = {p["name"]: [row["split_ttft_ms"] for row in p["rows"]] for p in d["profiles"]}
check(all(a <= b <= c for a, b, c in zip(split["fiber"], split["wifi"], split["4g"])), "TTFT by link speed")
# Early tokens: the cloud sent K = 4 of them with every length.
check(d["early_tokens"] == 4 and "EARLY" in d["early_note"], "early tokens asked and described")
check(d["projection_gpu_decode_step_ms"] > 0 and d["projection_gpu_decode_source"], "GPU decode step")
def near(a, b, what, rel=1e-3, abs_=2e-3):
    check(abs(a - b) <= rel * abs(b) + abs_, f"{what}: {a} != {b}")
for r in lengths:
    e = r.get("early")
    check(e is not None, f"prompt {r['prompt_len']}: no early figures")
    check(e["k"] == 4 and e["received"] == 4, f"prompt {r['prompt_len']}: {e['received']} of {e['k']} early tokens")
    for key in ["first_early_ms", "cloud_first_early_ms", "stream_cloud_ms"]:
        check(e[key] > 0, f"prompt {r['prompt_len']}: early {key} = {e[key]} must be > 0")
    check(isinstance(e["early_delta_ms"], (int, float)), "early_delta_ms")
for p in d["profiles"]:
    rate = p["bandwidth_bytes_per_s"] * (1 - p["loss"])
    window = max(4 * 1024 * 1024, 2 * p["bandwidth_bytes_per_s"] * p["rtt_ms"] / 1000)
    for row, r in zip(p["rows"], lengths):
        what = f"{p['name']} {row['prompt_len']}"
        check("early" in row and "projection_early" in row, f"{what}: early rows")
        for key in ["early", "projection_early"]:
            e = row[key]
            check(e["k"] == 4, f"{what} {key}: k")
            check(e["early_ttft_ms"] > p["rtt_ms"], f"{what} {key}: pays the RTT")
            near(e["ratio"], e["plain_split_ttft_ms"] / e["early_ttft_ms"], f"{what} {key}: ratio = plain / early")
        e, le = row["early"], r["early"]
        near(e["plain_split_ttft_ms"], row["split_ttft_ms"], f"{what}: plain = the split row")
        near(row["projection_early"]["plain_split_ttft_ms"], row["projection_split_ttft_ms"], f"{what}: PROJ plain")
        # The model, from the measured parts.
        since = max(0.0, le["first_early_ms"] - r["first_block_ms"])
        span = r["cloud_ms"] - r["first_block_ms"]
        produced = r["wire_bytes"] * (min(1.0, since / span) if span > 0 else 1.0)
        ahead = min(max(0.0, produced - rate * since / 1000), window)
        near(e["ahead_bytes"], ahead, f"{what}: bytes ahead", abs_=rate * 2e-6 + 1.0)  # ms rounded to 1e-3
        near(e["early_ttft_ms"], p["rtt_ms"] + le["first_early_ms"] + ahead / rate * 1000, f"{what}: early TTFT")
        transfer = r["wire_bytes"] / rate * 1000
        here = p["rtt_ms"] + max(le["stream_cloud_ms"], r["first_block_ms"] + transfer) + r["ingest_ms"] + \
            r["split_last_token_ms"] + le["early_delta_ms"]
        near(e["local_first_ms"], here, f"{what}: first token decoded here")
EOF

# On a link that is the bottleneck the early token comes first. (The tiny
# model's KV crosses even 4g in a few ms, less than the noise of a busy
# machine's CPU cloud, so the slowest profile here is a 100 kbit/s link. Its
# whole KV fits gRPC's 4 MiB window, so the early token still waits for it:
# it leads by the edge's ingest and last token only, a ratio of ~1.00.)
printf '4g 20mbit 60\nmodem 100kbit 60\n' > "${work}/slow.profiles"
"${baton}" "${common[@]}" --profiles-file "${work}/slow.profiles" --profiles 4g,modem --json > "${work}/slow.json" \
  2> "${work}/slow.err" || fail "bench split on the slow profiles failed: $(tail -5 "${work}/slow.err")"
"${python}" - "${work}/slow.json" << 'EOF' || fail "early tokens on the slowest profile (above)"
import json, sys
d = json.load(open(sys.argv[1]))
slowest = min(d["profiles"], key=lambda p: p["bandwidth_bytes_per_s"])
assert slowest["name"] == "modem", slowest["name"]
for row in slowest["rows"]:
    e = row["early"]
    what = f"{slowest['name']} {row['prompt_len']}"
    assert e["early_ttft_ms"] < e["plain_split_ttft_ms"], \
        f"{what}: early {e['early_ttft_ms']} not before plain {e['plain_split_ttft_ms']}"
    assert e["ratio"] >= 1, f"{what}: ratio {e['ratio']}"  # 1.000 when the whole KV fits the window
    assert abs(e["ratio"] - e["plain_split_ttft_ms"] / e["early_ttft_ms"]) < 2e-3 * e["ratio"] + 2e-3, f"{what}: ratio"
EOF

# Loss slows the modeled transfer; --early-tokens 0: no early rows.
"${baton}" "${common[@]}" --profiles 4g --loss 50 --early-tokens 0 --json > "${work}/loss.json" 2> /dev/null \
  || fail "--loss 50 failed"
"${python}" -c "
import json, sys
a = json.load(open(sys.argv[1])); b = json.load(open(sys.argv[2]))
assert b['profiles'][0]['loss'] == 0.5, b['profiles'][0]['loss']
assert b['early_tokens'] == 0 and 'early_note' not in b, 'early tokens off'
assert all('early' not in r for r in b['lengths']), 'no early figures with --early-tokens 0'
assert all('early' not in r for r in b['profiles'][0]['rows']), 'no early rows with --early-tokens 0'
" "${work}/split.json" "${work}/loss.json" || fail "--loss not applied or --early-tokens 0 not honoured"

# A bad profile name: one line, exit 1.
set +e
"${baton}" "${common[@]}" --profiles moon > /dev/null 2> "${work}/bad.err"
rc=$?
set -e
[[ ${rc} -eq 1 ]] || fail "unknown profile exit code ${rc}"
grep -q "moon" "${work}/bad.err" || fail "unknown profile message: $(cat "${work}/bad.err")"

# --early-tokens past the protocol's 64: one line, exit 1.
set +e
"${baton}" "${common[@]}" --early-tokens 65 > /dev/null 2> "${work}/early.err"
rc=$?
set -e
[[ ${rc} -eq 1 ]] || fail "--early-tokens 65 exit code ${rc}"
[[ $(wc -l < "${work}/early.err") -eq 1 ]] || fail "--early-tokens 65: not one line: $(cat "${work}/early.err")"
grep -q -- "--early-tokens 65 is not in 0..64" "${work}/early.err" \
  || fail "--early-tokens 65 message: $(cat "${work}/early.err")"

if command -v gnuplot > /dev/null; then
  "${baton}" "${common[@]}" --plot "${work}/split.png" > "${work}/table.txt" 2> "${work}/plot.err" \
    || fail "bench split --plot failed: $(tail -5 "${work}/plot.err")"
  [[ -s "${work}/split.png" ]] || fail "--plot wrote no PNG"
  [[ "$(head -c 8 "${work}/split.png" | od -An -tx1 | tr -d ' \n')" == "89504e470d0a1a0a" ]] \
    || fail "--plot output is not a PNG"
  grep -q "crossover (CPU cloud)" "${work}/table.txt" || fail "table lacks the crossover"
  grep -q "PROJECTION" "${work}/table.txt" || fail "table lacks the PROJECTION label"
  grep -q "early tokens (K = 4" "${work}/table.txt" || fail "table lacks the early-token rows"
else
  echo "bench_split_test: gnuplot not installed (deploy/install-deps.sh --profile test installs gnuplot-nox): plot check skipped"
fi
# --- --codec auto -------------------------------------------------------------
"${baton}" model calibrate --model "${work}/tiny-f16.gguf" --text-file "${src}/deploy/examples/chapter.txt" \
  --quality-codecs int8-gG-z3,int4-gG-z3,tc-b2 --holdout-tokens 256 -o "${work}/tiny.batoncal" \
  > "${work}/calibrate.out" 2>&1 || fail "model calibrate: $(tail -5 "${work}/calibrate.out")"
"${baton}" "${common[@]}" --calibration "${work}/tiny.batoncal" --json > "${work}/auto.json" 2> "${work}/auto.err" \
  || fail "bench split --codec auto failed: $(tail -5 "${work}/auto.err")"
"${python}" - "${work}/auto.json" << 'EOF' || fail "bench split --codec auto checks (above)"
import json, sys
d = json.load(open(sys.argv[1]))
def check(cond, what):
    if not cond:
        print("check failed:", what, file=sys.stderr)
        sys.exit(1)
codecs = [c["codec"] for c in d["codecs"]]
a = d["auto"]
table = {r["codec"]: r for r in a["quality_table"]}
int8 = next((c for c in table if c.startswith("int8-g")), None)
int4 = next((c for c in table if c.startswith("int4-g")), None)
check(len(table) == 3 and int8 and int4 and "tc-b2" in table, f"quality table {sorted(table)}")
check(codecs[0] == a["baseline"] and set(table) <= set(codecs), f"measured codecs {codecs}")
check(d["codec"] == codecs[0], "the top-level fields are the baseline's")
wire = {c["codec"]: c["lengths"][-1]["wire_bytes"] for c in d["codecs"]}
check(wire["tc-b2"] < wire[int4] < wire[int8], f"wire bytes by codec {wire}")
for p in a["profiles"]:
    check(len(p["rows"]) == 2, "two lengths")
    for row in p["rows"]:
        for key in ["auto", "projection_auto"]:
            r = row[key]
            check(r["codec"] in codecs, f"auto codec {r['codec']} was measured")
            check(r["codec"] not in table or table[r["codec"]]["ppl_delta_pct"] <= a["max_kv_loss_pct"],
                  f"{r['codec']} within the floor")
            check(r["reason"].startswith("codec auto:"), "reason")
            check(abs(r["gain"] - r["baseline_ttft_ms"] / r["overlap_ttft_ms"]) < 2e-3 * r["gain"] + 2e-3, "gain")
            check(abs(r["gain_vs_best"] - r["best_fixed_ttft_ms"] / r["overlap_ttft_ms"]) <
                  2e-3 * r["gain_vs_best"] + 2e-3, "gain vs best")
            check(r["best_fixed_ttft_ms"] <= r["baseline_ttft_ms"] + 1e-3, "the best fixed is no slower than the baseline")
        # The CPU-cloud auto row is the overlapped plan of its codec's own rows.
        c = next(c for c in d["codecs"] if c["codec"] == row["auto"]["codec"])
        prof = next(x for x in c["profiles"] if x["name"] == p["name"])
        own = next(x for x in prof["rows"] if x["prompt_len"] == row["prompt_len"])
        check(abs(own["overlap_ttft_ms"] - row["auto"]["overlap_ttft_ms"]) < 1e-3, "auto TTFT = its codec's overlap")
EOF
if command -v gnuplot > /dev/null; then
  "${baton}" "${common[@]}" --calibration "${work}/tiny.batoncal" --plot "${work}/auto.png" > "${work}/auto.txt" \
    2> "${work}/auto-plot.err" || fail "bench split --codec auto --plot failed: $(tail -5 "${work}/auto-plot.err")"
  [[ -s "${work}/auto.png" ]] || fail "--codec auto --plot wrote no PNG"
  grep -q "ovl+auto" "${work}/auto.txt" || fail "the auto table lacks its column"
fi
# auto without a calibration: one line, exit 1.
set +e
"${baton}" "${common[@]}" --codec auto > /dev/null 2> "${work}/noauto.err"
rc=$?
set -e
[[ ${rc} -eq 1 ]] || fail "--codec auto without --calibration: exit code ${rc}"
grep -q "needs --calibration" "${work}/noauto.err" || fail "auto without calibration: $(cat "${work}/noauto.err")"
echo "bench_split_test: ok"
