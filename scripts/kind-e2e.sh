#!/usr/bin/env bash
# Shoal on a real (kind) Kubernetes cluster, end to end: OPT-IN, run by hand.
#
# THIS SCRIPT CANNOT RUN ON THE MACHINES SHOAL IS DEVELOPED ON: they have no Docker engine and
# no network beyond package registries, so no kind cluster, no image pulls, no release
# manifests. There the Kubernetes engine is tested against a fake API server
# (tests/kubernetes/test_engine.py). Run this on a workstation or CI runner that has:
#   - docker (a running engine), kind >= 0.23, kubectl, and network access to github.com,
#     registry.k8s.io and Docker Hub;
#   - this checkout installed in the current Python: pip install -e '.[kubernetes]'.
#
# What it does:
#   1. creates a kind cluster (CLUSTER, default shoal-e2e);
#   2. installs JobSet and Kueue from their release manifests (JOBSET_VERSION, KUEUE_VERSION;
#      Shoal reads Kueue Workloads as kueue.x-k8s.io/v1beta2, so Kueue >= v0.15);
#   3. makes a ResourceFlavor, a ClusterQueue and a LocalQueue ("research");
#   4. runs MinIO in the cluster as the object store, port-forwarded for this machine;
#   5. builds the example's image with this checkout of Shoal in it and loads it into kind;
#   6. `shoal run --engine kubernetes examples/seed/ddp.py train_ddp --steps 20`.
# KEEP=1 keeps the cluster afterwards (default: deleted).
set -euo pipefail

CLUSTER=${CLUSTER:-shoal-e2e}
NS=${NS:-default}
JOBSET_VERSION=${JOBSET_VERSION:-v0.8.1}
KUEUE_VERSION=${KUEUE_VERSION:-v0.15.0}
REGISTRY=${REGISTRY:-kind.local/shoal}
MINIO_IMAGE=${MINIO_IMAGE:-minio/minio:RELEASE.2025-04-22T22-12-26Z}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)

for tool in docker kind kubectl python; do
  command -v "$tool" >/dev/null || { echo "kind-e2e: needs $tool on PATH" >&2; exit 2; }
done
docker info >/dev/null 2>&1 || { echo "kind-e2e: no Docker engine answers" >&2; exit 2; }

cleanup() {
  [[ -n "${PF_PID:-}" ]] && kill "$PF_PID" 2>/dev/null || true
  rm -rf "$WORK"
  [[ "${KEEP:-0}" == 1 ]] || kind delete cluster --name "$CLUSTER"
}
trap cleanup EXIT

echo "== 1. kind cluster $CLUSTER"
kind create cluster --name "$CLUSTER" --wait 120s
kubectl config use-context "kind-$CLUSTER"

echo "== 2. JobSet $JOBSET_VERSION and Kueue $KUEUE_VERSION"
kubectl apply --server-side -f \
  "https://github.com/kubernetes-sigs/jobset/releases/download/$JOBSET_VERSION/manifests.yaml"
kubectl apply --server-side -f \
  "https://github.com/kubernetes-sigs/kueue/releases/download/$KUEUE_VERSION/manifests.yaml"
kubectl -n jobset-system rollout status deploy/jobset-controller-manager --timeout=180s
kubectl -n kueue-system rollout status deploy/kueue-controller-manager --timeout=180s

echo "== 3. Kueue queues"
kubectl apply -f - <<YAML
apiVersion: kueue.x-k8s.io/v1beta1
kind: ResourceFlavor
metadata: {name: default-flavor}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: ClusterQueue
metadata: {name: team-a}
spec:
  namespaceSelector: {}
  resourceGroups:
  - coveredResources: [cpu, memory]
    flavors:
    - name: default-flavor
      resources:
      - {name: cpu, nominalQuota: 8}
      - {name: memory, nominalQuota: 16Gi}
---
apiVersion: kueue.x-k8s.io/v1beta1
kind: LocalQueue
metadata: {name: research, namespace: $NS}
spec: {clusterQueue: team-a}
YAML

echo "== 4. MinIO as the object store"
kubectl -n "$NS" apply -f - <<YAML
apiVersion: v1
kind: Secret
metadata: {name: shoal-store}
stringData: {AWS_ACCESS_KEY_ID: shoal, AWS_SECRET_ACCESS_KEY: shoal-secret, AWS_REGION: us-east-1}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: minio}
spec:
  selector: {matchLabels: {app: minio}}
  template:
    metadata: {labels: {app: minio}}
    spec:
      containers:
      - name: minio
        image: $MINIO_IMAGE
        args: [server, /data]
        env:
        - {name: MINIO_ROOT_USER, value: shoal}
        - {name: MINIO_ROOT_PASSWORD, value: shoal-secret}
        ports: [{containerPort: 9000}]
---
apiVersion: v1
kind: Service
metadata: {name: minio}
spec: {selector: {app: minio}, ports: [{port: 9000, targetPort: 9000}]}
YAML
kubectl -n "$NS" rollout status deploy/minio --timeout=180s
kubectl -n "$NS" port-forward svc/minio 9000:9000 >/dev/null 2>&1 &
PF_PID=$!
sleep 3
export AWS_ACCESS_KEY_ID=shoal AWS_SECRET_ACCESS_KEY=shoal-secret AWS_REGION=us-east-1
export SHOAL_S3_ENDPOINT=http://127.0.0.1:9000 SHOAL_STORE=s3://shoal/e2e
# MinIO accepts a bucket creation from any S3 client; obstore has none, so curl signs it.
curl -fsS -X PUT --aws-sigv4 "aws:amz:us-east-1:s3" --user shoal:shoal-secret \
  http://127.0.0.1:9000/shoal >/dev/null || true

echo "== 5. the example's image, with this checkout of Shoal"
IMAGE=$(cd "$ROOT" && python - "$REGISTRY" "$WORK/context" <<'PY'
import sys
from shoal._runtime.loader import find_task
task = find_task("examples/seed/ddp.py", "train_ddp")
image = task.env.spec().image
image.write_build_context(sys.argv[2])
print(image.uri(sys.argv[1]))
PY
)
docker build -t "$IMAGE-base" "$WORK/context"
cp -r "$ROOT/src" "$ROOT/pyproject.toml" "$ROOT/README.md" "$WORK/"
cat > "$WORK/Dockerfile" <<DOCKER
FROM $IMAGE-base
COPY pyproject.toml README.md /shoal/
COPY src /shoal/src
RUN pip install --no-cache-dir '/shoal[kubernetes]'
DOCKER
docker build -t "$IMAGE" "$WORK"
kind load docker-image --name "$CLUSTER" "$IMAGE"

echo "== 6. shoal run --engine kubernetes"
cat > "$WORK/kube.yaml" <<YAML
namespace: $NS
registry: $REGISTRY
default_image: $IMAGE
store_secret: shoal-store
s3_endpoint: http://minio.$NS.svc:9000
default_queue: research
ttl_seconds_after_finished: 600
YAML
cd "$ROOT"
shoal run --engine kubernetes --kube-settings "$WORK/kube.yaml" \
  examples/seed/ddp.py train_ddp --steps 20
echo "kind-e2e: passed"
