#!/usr/bin/env bash
# The Kubernetes manifests of deploy/k8s, checked without a cluster.
#
# Rendered client-side with `kubectl kustomize` (`kubectl create
# --dry-run=client -f` is not used: it still asks an API server for the
# resource types, and fails without one); skipped without kubectl, since
# what the cluster gets is what kustomize renders. Then parsed with python3-yaml and checked against what ddprun
# needs: an Indexed Job whose pods' subdomain is the headless Service, a
# node count that agrees in completions, parallelism and PET_NNODES,
# --rdzv-backend k8s, GPUs requested, the ConfigMap and the volume claim
# the Job mounts. The ConfigMap's train.ini must run train (3 steps), and
# ddprun given a pod's environment (index 1) must derive node rank 1 and
# the endpoint ddp-train-0.ddp-train:29400 from it.
#
# Usage: k8s_manifests.sh K8S_DIR TRAIN DDPRUN
set -u
name=deploy_k8s
dir=${1:?usage: k8s_manifests.sh K8S_DIR TRAIN DDPRUN} train=${2:?} ddprun=${3:?}
python3 -c 'import yaml' 2>/dev/null ||
  { echo "SKIP: $name: needs python3 and python3-yaml (deploy/setup.sh installs it)"; exit 77; }
. "$(dirname "$0")/lib.sh"

command -v kubectl >/dev/null 2>&1 ||
  { echo "SKIP: $name: needs kubectl to render the manifests as kustomize does"; exit 77; }
KUBECONFIG=/dev/null timeout 30 kubectl kustomize "$dir" >"$tmp/all.yaml" \
  2>"$tmp/kustomize.err" ||
  { cat "$tmp/kustomize.err" >&2; fail "kubectl kustomize $dir failed"; }
how="kubectl kustomize"

# Checks the objects; writes train.ini and the pod's ddprun arguments and
# environment (one a line) into the temporary directory.
python3 - "$tmp/all.yaml" "$tmp" "$dir/kustomization.yaml" <<'EOF' ||
import sys, yaml

path, out, kust = sys.argv[1], sys.argv[2], sys.argv[3]
docs = [d for d in yaml.safe_load_all(open(path)) if d]
problems = []
def need(cond, what):
    if not cond:
        problems.append(what)

by_kind = {}
for d in docs:
    by_kind.setdefault(d.get("kind"), []).append(d)
listed = yaml.safe_load(open(kust)).get("resources", [])
need(len(docs) == len(listed),
     "%d objects rendered, %d files in kustomization.yaml" % (len(docs), len(listed)))
for kind in ("Job", "Service", "ConfigMap", "PersistentVolumeClaim"):
    need(len(by_kind.get(kind, [])) == 1, "want exactly one %s" % kind)
if problems:
    print("\n".join(problems)); sys.exit(1)

job, svc = by_kind["Job"][0], by_kind["Service"][0]
cm, pvc = by_kind["ConfigMap"][0], by_kind["PersistentVolumeClaim"][0]
js, pod = job["spec"], job["spec"]["template"]["spec"]
jname, sname = job["metadata"]["name"], svc["metadata"]["name"]

need(job["apiVersion"] == "batch/v1", "Job apiVersion is not batch/v1")
need(js.get("completionMode") == "Indexed", "the Job is not Indexed")
need(js.get("completions") == js.get("parallelism"),
     "completions and parallelism differ")
need(svc["spec"].get("clusterIP") == "None", "the Service is not headless")
need(svc["spec"].get("publishNotReadyAddresses") is True,
     "the Service must publish pods before they are ready")
need(svc["spec"].get("selector", {}).get("job-name") == jname,
     "the Service does not select the Job's pods")
need(any(p.get("port") == 29400 for p in svc["spec"].get("ports", [])),
     "the Service has no port 29400")
need(pod.get("subdomain") == sname, "the pods' subdomain is not the Service")
need(pod.get("restartPolicy") == "Never",
     "restartPolicy must be Never (podFailurePolicy)")

ctrs = [c for c in pod["containers"] if c.get("command", [None])[0] == "ddprun"]
need(len(ctrs) == 1, "want one container running ddprun")
if problems:
    print("\n".join(problems)); sys.exit(1)
c = ctrs[0]
args = c.get("args", [])
env = {e["name"]: e.get("value") for e in c.get("env", [])}
need("--rdzv-backend=k8s" in args or env.get("PET_RDZV_BACKEND") == "k8s",
     "ddprun is not given --rdzv-backend k8s")
need(env.get("PET_NNODES") == str(js.get("completions")),
     "PET_NNODES %r is not completions %r" % (env.get("PET_NNODES"), js.get("completions")))
need(env.get("DDPRUN_K8S_SERVICE") == sname,
     "DDPRUN_K8S_SERVICE is not the Service's name")
gpus = c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu")
need(isinstance(gpus, int) and gpus > 0, "no GPUs requested")
rules = js.get("podFailurePolicy", {}).get("rules", [])
ignored = [v for r in rules if r.get("action") == "Ignore"
           for v in r.get("onExitCodes", {}).get("values", [])]
failing = [v for r in rules if r.get("action") == "FailJob"
           for v in r.get("onExitCodes", {}).get("values", [])]
need(75 in ignored, "exit 75 (preempted) should be ignored and retried")
need(2 in failing and 5 in failing, "exits 2 and 5 should fail the Job")

vols = {v["name"]: v for v in pod.get("volumes", [])}
mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
cms = [v for v in vols.values() if "configMap" in v]
need(len(cms) == 1 and cms[0]["configMap"]["name"] == cm["metadata"]["name"],
     "the Job does not mount the ConfigMap")
claims = [v for v in vols.values() if "persistentVolumeClaim" in v]
need(len(claims) == 1 and
     claims[0]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"],
     "the Job does not mount the claim")
if problems:
    print("\n".join(problems)); sys.exit(1)
cfg_dir = mounts[cms[0]["name"]]
ini_args = [a for a in args if a.startswith("--config=")]
need(len(ini_args) == 1 and ini_args[0].startswith("--config=" + cfg_dir + "/"),
     "train's --config is not in the ConfigMap's mount")
key = ini_args[0].split("/")[-1] if ini_args else ""
need(key in cm.get("data", {}), "the ConfigMap has no %r" % key)
ckpt = [a for a in args if a.startswith("--ckpt-dir=")]
need(len(ckpt) == 1 and ckpt[0] == "--ckpt-dir=" + mounts[claims[0]["name"]],
     "--ckpt-dir must be the claim's mount point (it must exist)")
if problems:
    print("\n".join(problems)); sys.exit(1)

open(out + "/train.ini", "w").write(cm["data"][key])
with open(out + "/args", "w") as f:
    for a in args:
        f.write(a + "\n")
with open(out + "/env", "w") as f:
    for k, v in env.items():
        f.write("%s=%s\n" % (k, v))
with open(out + "/job", "w") as f:
    f.write("%s %s %d\n" % (jname, sname, js["completions"]))
EOF
  fail "the manifests do not fit ddprun (above)"
echo "$name: $how: $(grep -c '^kind:' "$tmp/all.yaml") objects fit ddprun's contract"

read -r job svc nnodes <"$tmp/job"

# The ConfigMap's settings run train (a few steps of them).
run 120 ini env OMP_NUM_THREADS=1 "$train" --config "$tmp/train.ini" --steps 3 \
  --log-every 1
[ "$rc" -eq 0 ] || die ini "train --config train.ini exited $rc"
grep -q "final .*steps=3 " "$tmp/ini.out" || die ini "no final line for 3 steps"

# ddprun in the pod of index 1: the pod's environment and arguments, with
# one worker (no GPUs here), /bin/true for train and a short join timeout,
# since the name of pod 0 does not resolve outside the cluster.
mapfile -t pod_env <"$tmp/env"
mapfile -t pod_args <"$tmp/args"
argv=()
for a in "${pod_args[@]}"; do
  case "$a" in
    --nproc-per-node=*) argv+=(--nproc-per-node=1) ;;
    train) argv+=(--rdzv-conf=join_timeout=1 /bin/true); break ;;
    *) argv+=("$a") ;;
  esac
done
argv=("${argv[@]/--log-dir=*/--log-dir=$tmp/logs}")
# In a network namespace of its own with nothing but a loopback that is
# down: the lookup of pod 0's name fails there without a query leaving
# this machine.
isolate=()
if unshare -n true 2>/dev/null; then
  isolate=(unshare -n)
elif unshare -rn true 2>/dev/null; then
  isolate=(unshare -rn)
else
  echo "$name: index 1 not run: needs unshare -n (root or user namespaces) so that no name lookup leaves the machine"
  echo "PASS: $name"
  exit 0
fi
run 30 pod1 "${isolate[@]}" env "${pod_env[@]}" JOB_COMPLETION_INDEX=1 \
  HOSTNAME="$job-1" "$ddprun" "${argv[@]}"
grep -qx "ddprun: Kubernetes: nnodes $nnodes, node rank 1, rendezvous $job-0.$svc:29400, run id $job" \
  "$tmp/pod1.err" || die pod1 "ddprun did not derive node rank 1 and $job-0.$svc:29400"
grep -q "cannot resolve the rendezvous endpoint '$job-0.$svc' yet" "$tmp/pod1.err" ||
  die pod1 "ddprun did not wait for pod 0's name"
[ "$rc" -eq 3 ] || die pod1 "ddprun exited $rc, not 3, when the name never resolved"
echo "$name: index 1 derives node rank 1 of $nnodes and $job-0.$svc:29400, run id $job"
echo "PASS: $name"
