#!/usr/bin/env bash
# Offline checks of deploy/: no container engine or cluster runs here, so this
# checks what can be checked without one, and says what it skipped.
#   - Kubernetes manifests and the Envoy config parse as YAML (python3-yaml),
#     and hold what the design needs (GPU selector and limits, probes on the
#     service's Health, drain, PDB, HPA on queue depth, ring hash on the
#     baton-prefix-digest header);
#   - the systemd unit passes `systemd-analyze verify` with no warnings;
#   - the Dockerfiles are multi-stage, run as a non-root user, and every path
#     they COPY from the build context exists;
#   - the WAN scripts parse (bash -n) and shellcheck is clean where installed;
#   - what ships is authenticated and TLS: edge.conf, the unit and the edge
#     image give API keys and a certificate (never 0.0.0.0 without a key), the
#     cloud's Deployment serves TLS with tenant tokens, and Envoy speaks TLS
#     on both sides.
# usage: deploy_lint_test.sh BIN_DIR SOURCE_DIR
set -euo pipefail
bin=$1
src=$2
deploy="${src}/deploy"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*"; }
checked=()

# --- YAML ------------------------------------------------------------------
python=/usr/bin/python3
if [[ -x "${python}" ]] && "${python}" -c 'import yaml' 2>/dev/null; then
  "${python}" - "${deploy}/k8s" <<'EOF' || fail "Kubernetes manifests (see above)"
import glob, os, sys, yaml

k8s = sys.argv[1]
problems = []
docs = {}
for path in sorted(glob.glob(os.path.join(k8s, "*.yaml"))):
    name = os.path.basename(path)
    try:
        loaded = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    except yaml.YAMLError as e:
        problems.append(f"{name}: not valid YAML: {e}")
        continue
    if not loaded:
        problems.append(f"{name}: empty")
    docs[name] = loaded
    if name in ("envoy.yaml", "kustomization.yaml"):
        continue
    for d in loaded:
        for key in ("apiVersion", "kind", "metadata"):
            if key not in d:
                problems.append(f"{name}: a document lacks {key}")
        if "metadata" in d and not d["metadata"].get("name"):
            problems.append(f"{name}: {d.get('kind')} without metadata.name")

def by_kind(kind):
    return [d for ds in docs.values() for d in ds if isinstance(d, dict) and d.get("kind") == kind]

def need(cond, what):
    if not cond:
        problems.append(what)

# Every resource the kustomization names exists.
kust = docs.get("kustomization.yaml", [{}])[0]
for res in kust.get("resources", []):
    need(os.path.exists(os.path.join(k8s, res)), f"kustomization.yaml: resource {res} missing")
for gen in kust.get("configMapGenerator", []):
    for f in gen.get("files", []):
        need(os.path.exists(os.path.join(k8s, f)), f"kustomization.yaml: configMap file {f} missing")

prefill = [d for d in by_kind("Deployment") if d["metadata"]["name"] == "baton-prefill"]
need(len(prefill) == 1, "no Deployment baton-prefill")
if prefill:
    spec = prefill[0]["spec"]["template"]["spec"]
    need(any("gpu" in k for k in spec.get("nodeSelector", {})), "prefill: no GPU nodeSelector")
    need(spec.get("terminationGracePeriodSeconds", 0) >= 30, "prefill: terminationGracePeriodSeconds < 30")
    need(spec.get("securityContext", {}).get("runAsNonRoot") is True, "prefill: not runAsNonRoot")
    c = spec["containers"][0]
    need(str(c["resources"]["limits"].get("nvidia.com/gpu")) == "1", "prefill: no nvidia.com/gpu limit")
    for probe in ("readinessProbe", "livenessProbe"):
        p = c.get(probe, {})
        cmd = " ".join(p.get("exec", {}).get("command", []))
        need(("health" in cmd and "--cloud" in cmd) or "grpc" in p, f"prefill: {probe} not wired to Health")
    need("--ready" in " ".join(c["readinessProbe"]["exec"]["command"]), "prefill: readiness does not require READY")
    need("preStop" in c.get("lifecycle", {}), "prefill: no preStop hook (drain)")
    need(any(a.startswith("--drain-timeout") for a in c.get("args", [])), "prefill: no --drain-timeout")

need(len(by_kind("PodDisruptionBudget")) == 1, "no PodDisruptionBudget")
hpas = by_kind("HorizontalPodAutoscaler")
need(len(hpas) == 1, "no HorizontalPodAutoscaler")
if hpas:
    names = [m.get("pods", {}).get("metric", {}).get("name", "") for m in hpas[0]["spec"]["metrics"]]
    need(any("queue" in n for n in names), "HPA does not scale on a queue-depth metric")
need(any(d["spec"].get("clusterIP") == "None" for d in by_kind("Service")), "no headless Service for the balancer")

envoy = docs.get("envoy.yaml", [None])[0]
need(envoy is not None, "envoy.yaml missing")
if envoy:
    text = yaml.safe_dump(envoy)
    need("RING_HASH" in text, "envoy.yaml: cluster not RING_HASH")
    need("header_name: baton-prefix-digest" in text, "envoy.yaml: no hash on baton-prefix-digest")
    need("http2_protocol_options" in text, "envoy.yaml: upstream not HTTP/2 (gRPC)")
    need("DownstreamTlsContext" in text, "envoy.yaml: the listener is not TLS")
    need("UpstreamTlsContext" in text and "trusted_ca" in text, "envoy.yaml: replicas not reached over verified TLS")

for d in by_kind("Deployment"):
    if d["metadata"]["name"] != "baton-prefill":
        continue
    args = " ".join(a for c in d["spec"]["template"]["spec"]["containers"] for a in c.get("args", []))
    for flag in ("--tls-cert=", "--tls-key=", "--auth-tokens="):
        need(flag in args, f"prefill-deployment: baton-prefill without {flag[:-1]}")
    secrets = [v["secret"]["secretName"] for v in d["spec"]["template"]["spec"].get("volumes", []) if "secret" in v]
    need(len(secrets) >= 2, "prefill-deployment: TLS and tokens do not come from Secrets")

# The shared state tier (issue 19): one authenticated TLS Redis that keeps
# packs (no eviction of keys without a TTL), and every replica pointed at it.
redis = [d for d in by_kind("StatefulSet") if d["metadata"]["name"] == "baton-redis"]
need(len(redis) == 1, "no StatefulSet baton-redis (the shared state tier)")
if redis:
    rargs = " ".join(a for c in redis[0]["spec"]["template"]["spec"]["containers"]
                     for a in c.get("command", []) + c.get("args", []))
    for word in ("--requirepass", "--tls-port", "--port 0", "--maxmemory-policy volatile-lru", "--appendonly yes"):
        need(word in rargs, f"redis.yaml: redis-server without {word}")
    need(redis[0]["spec"].get("volumeClaimTemplates"), "redis.yaml: no persistent volume for the packs")
need(any(d["metadata"]["name"] == "baton-redis" for d in by_kind("Service")), "no Service baton-redis")
for d in by_kind("Deployment"):
    if d["metadata"]["name"] != "baton-prefill":
        continue
    args = [a for c in d["spec"]["template"]["spec"]["containers"] for a in c.get("args", [])]
    need(any(a.startswith("--state=rediss://") for a in args), "prefill-deployment: replicas not on the TLS Redis tier")
    need(any(a.startswith("--state-password-file=") for a in args), "prefill-deployment: Redis without a password file")

for p in problems:
    print("  " + p, file=sys.stderr)
sys.exit(1 if problems else 0)
EOF
  checked+=("k8s manifests and envoy.yaml (python3-yaml)")
else
  skip "YAML: /usr/bin/python3 with the yaml module (python3-yaml) not found"
fi

# --- systemd ---------------------------------------------------------------
unit="${deploy}/systemd/baton-edge.service"
[[ -f "${unit}" ]] || fail "missing ${unit}"
grep -q '^ExecStart=.*baton-edge .*--config ' "${unit}" || fail "unit: ExecStart does not pass --config"
for option in NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes PrivateTmp=yes CapabilityBoundingSet= \
              StateDirectory=baton SystemCallFilter=@system-service; do
  grep -q "^${option}" "${unit}" || fail "unit: hardening option ${option} missing"
done
[[ -f "${deploy}/systemd/edge.conf" ]] || fail "missing deploy/systemd/edge.conf"
# Authenticated and TLS by default: keys and a certificate, handed over as credentials.
conf="${deploy}/systemd/edge.conf"
for name in api-key-file tls-cert tls-key; do
  grep -q "^${name} *= *[^ ]" "${conf}" || fail "edge.conf: '${name}' is not set"
done
grep -q '^LoadCredential=api-keys:' "${unit}" || fail "unit: the API key file is not a LoadCredential="
grep -q '^insecure-public' "${conf}" && fail "edge.conf ships --insecure-public"
listen=$(sed -n 's/^listen *= *//p' "${conf}")
case "${listen}" in 127.*|localhost:*|\[::1\]:*) ;; *) grep -q '^api-key-file' "${conf}" || fail "edge.conf: ${listen} without keys";; esac
edge_entry=$(sed -n '/^ENTRYPOINT/,/[^\\]$/p' "${deploy}/docker/edge.Dockerfile" | tr -d '\n')
if grep -q '0\.0\.0\.0' <<< "${edge_entry}"; then
  for flag in --api-key-file --tls-cert --tls-key; do
    grep -q -- "\"${flag}\"" <<< "${edge_entry}" || fail "edge.Dockerfile: binds 0.0.0.0 without ${flag}"
  done
fi
grep -q -- '--insecure-public' "${deploy}/docker/edge.Dockerfile" && fail "edge.Dockerfile ships --insecure-public"
checked+=("shipped configurations: API keys and TLS")
# Every 'name = value' of the example config is a flag baton-edge knows.
if [[ -x "${bin}/baton-edge" ]]; then
  "${bin}/baton-edge" --help > "${work}/edge-help.txt" 2>&1 || true
  while read -r name; do
    grep -q -- "--${name}\b" "${work}/edge-help.txt" || fail "edge.conf: '${name}' is not a baton-edge flag"
  done < <(sed -n 's/^[[:space:]]*\([a-z-]*\)[[:space:]]*=.*/\1/p' "${deploy}/systemd/edge.conf")
  checked+=("edge.conf names against baton-edge --help")
fi
if command -v systemd-analyze > /dev/null 2>&1; then
  # verify checks that ExecStart's binary exists: point it at a built one.
  exec_bin="${bin}/baton-edge"
  [[ -x "${exec_bin}" ]] || exec_bin=/bin/true
  sed "s|/usr/local/bin/baton-edge|${exec_bin}|" "${unit}" > "${work}/baton-edge.service"
  systemd-analyze verify "${work}/baton-edge.service" > "${work}/verify.txt" 2>&1 || {
    cat "${work}/verify.txt" >&2
    fail "systemd-analyze verify failed"
  }
  if grep -q "baton-edge.service" "${work}/verify.txt"; then
    cat "${work}/verify.txt" >&2
    fail "systemd-analyze verify warns about the unit"
  fi
  checked+=("systemd-analyze verify")
else
  skip "systemd unit: systemd-analyze not installed"
fi

# --- Dockerfiles -----------------------------------------------------------
for dockerfile in "${deploy}/docker/prefill.Dockerfile" "${deploy}/docker/edge.Dockerfile"; do
  name=$(basename "${dockerfile}")
  [[ -f "${dockerfile}" ]] || fail "missing ${dockerfile}"
  # Join continuation lines, drop comments.
  sed -e 's/#.*$//' "${dockerfile}" | sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta' > "${work}/df"
  [[ $(grep -c '^FROM ' "${work}/df") -ge 2 ]] || fail "${name}: not a multi-stage build"
  last_user=$(grep '^USER ' "${work}/df" | tail -1 | awk '{print $2}')
  [[ -n "${last_user}" && "${last_user}" != "root" && "${last_user}" != "0" && "${last_user}" != 0:* ]] ||
    fail "${name}: the final stage does not switch to a non-root USER"
  # COPY sources from the build context (not --from=stage) must exist.
  while read -r line; do
    read -r -a words <<< "${line}"
    sources=()
    for word in "${words[@]:1}"; do
      [[ "${word}" == --from=* ]] && continue 2
      [[ "${word}" == --* ]] && continue
      sources+=("${word}")
    done
    unset 'sources[${#sources[@]}-1]'  # the destination
    for s in "${sources[@]}"; do
      [[ -e "${src}/${s}" ]] || fail "${name}: COPY source '${s}' does not exist in the repository"
      # A directory must hold tracked files, or a clean checkout lacks it.
      if [[ -d "${src}/${s}" ]] && command -v git > /dev/null 2>&1 && git -C "${src}" rev-parse > /dev/null 2>&1; then
        [[ -n "$(git -C "${src}" ls-files -- "${s}" | head -1)" ]] || {
          [[ -n "$(find "${src}/${s}" -type f | head -1)" ]] || fail "${name}: COPY source '${s}' is empty"
        }
      fi
    done
  done < <(grep -E '^(COPY|ADD) ' "${work}/df")
done
grep -q '^FROM nvidia/cuda:.*runtime' "${deploy}/docker/prefill.Dockerfile" || fail "prefill.Dockerfile: runtime stage is not nvidia/cuda runtime"
grep -q '^FROM debian:12-slim' "${deploy}/docker/edge.Dockerfile" || fail "edge.Dockerfile: runtime stage is not debian:12-slim"
checked+=("Dockerfiles: stages, USER, COPY paths")
if command -v hadolint > /dev/null 2>&1; then
  hadolint "${deploy}/docker/"*.Dockerfile || fail "hadolint"
  checked+=("hadolint")
else
  skip "Dockerfiles: hadolint not installed (and no container engine to build them)"
fi

# --- WAN scripts -----------------------------------------------------------
for script in "${deploy}/wan/"*.sh; do
  bash -n "${script}" || fail "$(basename "${script}"): bash syntax"
done
[[ -f "${deploy}/wan/profiles" ]] || fail "missing deploy/wan/profiles"
checked+=("WAN scripts: bash -n")
if command -v shellcheck > /dev/null 2>&1; then
  (cd "${deploy}/wan" && shellcheck -x -S warning ./*.sh) || fail "shellcheck deploy/wan"
  checked+=("shellcheck")
else
  skip "WAN scripts: shellcheck not installed"
fi

printf 'checked: %s\n' "${checked[@]}"
echo "deploy lint: ok"
