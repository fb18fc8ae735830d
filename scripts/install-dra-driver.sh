#!/usr/bin/env bash
# Install, upgrade or remove the neuron.aws.com DRA driver with the manifests in deploy/
# (the Helm chart deploy/helm/neuron-dra rendered with its default values).
#
# Exit codes: 0 done; 1 kubectl reported an error while applying or deleting;
# 2 bad usage; 3 the environment is not ready (no kubectl, no cluster, no
# resource.k8s.io/v1); 4 the DaemonSet did not finish rolling out in time.
set -euo pipefail

readonly NAMESPACE=neuron-dra
readonly DAEMONSET=neuron-dra
readonly FIELD_MANAGER=neuron-dra-installer
readonly PLACEHOLDER=NEURON_DRA_IMAGE
readonly SELECTOR=app.kubernetes.io/name=neuron-dra
# Through symlinks (e.g. examples/scripts/install-dra-driver.sh) to the real
# script, whose ../deploy holds the manifests; readlink -f is not on every macOS.
script=${BASH_SOURCE[0]}
while [[ -L $script ]]; do
    target=$(readlink "$script")
    [[ $target == /* ]] || target="$(dirname "$script")/$target"
    script=$target
done
DEPLOY_DIR="$(cd "$(dirname "$script")/../deploy" && pwd)"
readonly DEPLOY_DIR
# Applied in this order: the namespace before what lives in it. Namespaced
# manifests are listed apart because a server-side dry run cannot place them in
# a namespace that does not exist yet.
readonly CLUSTER_MANIFESTS=(namespace.yaml rbac.yaml admission-policy.yaml config-policy.yaml core-request-policy.yaml deviceclass.yaml)
readonly NAMESPACED_MANIFESTS=(serviceaccount.yaml service.yaml networkpolicy.yaml daemonset.yaml)

usage() {
    cat <<EOF
Usage: $(basename "$0") IMAGE [--dry-run] [--no-wait] [--timeout DURATION]
       $(basename "$0") --uninstall [--dry-run]

Installs or upgrades the neuron.aws.com DRA driver (namespace $NAMESPACE) in the
cluster of kubectl's current context, with the plugin image IMAGE.

  IMAGE               plugin image, e.g. 123456789012.dkr.ecr.us-west-2.amazonaws.com/neuron-dra:0.1.0
  --dry-run           send everything with --dry-run=server; nothing is changed
  --no-wait           do not wait for the DaemonSet rollout
  --timeout DURATION  how long to wait for the rollout (default 300s)
  --uninstall         delete everything the install created
  -h, --help          this text

Environment: KUBECTL (kubectl binary, default: kubectl on PATH), KUBECONFIG.
EOF
}

die() {
    local code=$1
    shift
    echo "error: $*" >&2
    exit "$code"
}

usage_error() {
    echo "error: $*" >&2
    usage >&2
    exit 2
}

image=""
dry_run=false
wait=true
timeout=300s
uninstall=false
while (($#)); do
    case $1 in
        -h | --help)
            usage
            exit 0
            ;;
        --dry-run) dry_run=true ;;
        --no-wait) wait=false ;;
        --uninstall) uninstall=true ;;
        --timeout)
            (($# >= 2)) || usage_error "--timeout needs a duration, e.g. 300s"
            timeout=$2
            shift
            ;;
        --timeout=*) timeout=${1#--timeout=} ;;
        -*) usage_error "unknown option $1" ;;
        *)
            [[ -z $image ]] || usage_error "more than one IMAGE: '$image' and '$1'"
            image=$1
            ;;
    esac
    shift
done

if $uninstall; then
    [[ -z $image ]] || usage_error "--uninstall takes no IMAGE"
else
    [[ -n $image ]] || usage_error "missing IMAGE"
    # The image lands in YAML and in a sed expression: allow only what an
    # image reference can hold.
    [[ $image =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]*$ ]] ||
        usage_error "'$image' is not an image reference (registry/repository:tag or @sha256:...)"
fi
[[ $timeout =~ ^[0-9]+(s|m|h)?$ ]] || usage_error "--timeout '$timeout' is not a duration like 300s or 5m"

# Resolved to its path before the function below is defined: a function named
# kubectl calling plain "kubectl" would call itself, bash finding functions first.
if ! kubectl_bin=$(command -v "${KUBECTL:-kubectl}"); then
    if [[ -n ${KUBECTL:-} ]]; then
        die 3 "KUBECTL=$KUBECTL is not an executable kubectl"
    fi
    die 3 "kubectl not found on PATH; install it or set KUBECTL to its path"
fi
readonly kubectl_bin
kubectl() { command "$kubectl_bin" "$@"; }

context=$(kubectl config current-context 2>/dev/null || echo "(none)")
if ! version_error=$(kubectl version --request-timeout=15s -o json 2>&1 >/dev/null); then
    die 3 "cannot reach the cluster of context '$context' (kubectl version failed):
$version_error
Check KUBECONFIG and 'kubectl config current-context'."
fi

api_versions=$(kubectl api-versions --request-timeout=15s) ||
    die 3 "cannot list the cluster's API versions (kubectl api-versions failed)"
if ! grep -qx 'resource.k8s.io/v1' <<<"$api_versions"; then
    served=$(grep '^resource.k8s.io/' <<<"$api_versions" | paste -sd, - || true)
    if [[ -n $served ]]; then
        die 3 "the cluster serves only $served of Dynamic Resource Allocation, not resource.k8s.io/v1:
it is older than Kubernetes 1.34 or has resource.k8s.io/v1 disabled.
Upgrade the control plane to 1.34 or later (or enable it with --runtime-config=resource.k8s.io/v1=true)."
    fi
    die 3 "the cluster does not serve resource.k8s.io/v1 (Dynamic Resource Allocation):
it is older than Kubernetes 1.34 or has the API disabled; upgrade the control plane to 1.34 or later."
fi
if ! grep -qx 'admissionregistration.k8s.io/v1' <<<"$api_versions"; then
    die 3 "the cluster does not serve admissionregistration.k8s.io/v1 (needed for ValidatingAdmissionPolicy)"
fi

dry_run_args=()
if $dry_run; then
    dry_run_args=(--dry-run=server)
fi

# Prints the manifests as one stream of YAML documents, with the image set.
render() {
    local file
    for file in "$@"; do
        printf -- '---\n'
        sed "s|image: $PLACEHOLDER\$|image: $image|" "$DEPLOY_DIR/$file"
    done
}

echo "context: $context"

if $uninstall; then
    echo "removing the neuron.aws.com DRA driver${dry_run_args[*]:+ (dry run)}"
    # Reverse order: the DaemonSet goes first so no plugin is left without its
    # permissions; deleting the namespace waits until its pods are gone.
    image=$PLACEHOLDER
    all=("${CLUSTER_MANIFESTS[@]}" "${NAMESPACED_MANIFESTS[@]}")
    reversed=()
    for ((i = ${#all[@]} - 1; i >= 0; i--)); do
        reversed+=("${all[i]}")
    done
    render "${reversed[@]}" |
        kubectl delete --ignore-not-found --wait=true --timeout="$timeout" \
            ${dry_run_args[@]+"${dry_run_args[@]}"} -f - || die 1 "kubectl delete failed"
    echo "The ResourceSlices the plugins published are deleted by each node's kubelet once"
    echo "the plugin is gone (about 30 s), or with their Node by garbage collection."
    exit 0
fi

apply() {
    kubectl apply --server-side --field-manager="$FIELD_MANAGER" \
        ${dry_run_args[@]+"${dry_run_args[@]}"} -f -
}

echo "installing the neuron.aws.com DRA driver, image $image${dry_run_args[*]:+ (dry run)}"
# v1beta1 is off by default on every release (and deprecated from 1.35): the seed's
# v1beta1 spellings work only where an operator turned it on, so say which applies.
if ! grep -qx 'resource.k8s.io/v1beta1' <<<"$api_versions"; then
    echo "note: resource.k8s.io/v1beta1 is not served here: write claims in resource.k8s.io/v1 (examples/specs/*.yaml; examples/specs/v1beta1/ would be refused)"
fi
render "${CLUSTER_MANIFESTS[@]}" | apply || die 1 "kubectl apply failed"
if $dry_run && ! kubectl get namespace "$NAMESPACE" >/dev/null 2>&1; then
    # The dry run did not create the namespace, so the namespaced objects are
    # validated in "default" instead; their manifests name no other namespace.
    echo "namespace $NAMESPACE does not exist yet: checking its objects in namespace default"
    render "${NAMESPACED_MANIFESTS[@]}" | sed "s|^  namespace: $NAMESPACE\$|  namespace: default|" |
        apply || die 1 "kubectl apply failed"
    exit 0
fi
render "${NAMESPACED_MANIFESTS[@]}" | apply || die 1 "kubectl apply failed"

if $dry_run || ! $wait; then
    exit 0
fi

echo "waiting up to $timeout for daemonset/$DAEMONSET to roll out"
if ! kubectl rollout status "daemonset/$DAEMONSET" -n "$NAMESPACE" --timeout="$timeout"; then
    kubectl get pods -n "$NAMESPACE" -l "$SELECTOR" -o wide >&2 || true
    die 4 "daemonset/$DAEMONSET did not roll out within $timeout; see the pods above and
'kubectl describe daemonset/$DAEMONSET -n $NAMESPACE'"
fi
desired=$(kubectl get "daemonset/$DAEMONSET" -n "$NAMESPACE" \
    -o 'jsonpath={.status.desiredNumberScheduled}')
if [[ ${desired:-0} == 0 ]]; then
    echo "warning: no node runs the plugin: none has a Neuron instance type" \
        "(label node.kubernetes.io/instance-type) and accepts the pods" >&2
    exit 0
fi
echo "the plugin runs on $desired node(s)."
echo "its metrics (port 9400) answer only a bearer token of a user allowed to get /metrics:"
echo "bind a scraper's service account to the ClusterRole neuron-dra-metrics-reader, e.g."
echo "  kubectl create clusterrolebinding prometheus-reads-neuron-dra --clusterrole=neuron-dra-metrics-reader --serviceaccount=monitoring:prometheus"
echo "recent logs:"
if ! kubectl logs -n "$NAMESPACE" -l "$SELECTOR" --prefix --tail=10 --max-log-requests=10 \
    --request-timeout=15s; then
    echo "(logs not available: 'kubectl logs -n $NAMESPACE -l $SELECTOR' failed)" >&2
fi
