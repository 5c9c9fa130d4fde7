#!/usr/bin/env bash
# Builds a release's five images with podman, all at one tag:
#   <registry>/display-declare, -weston, -operator, -capture and
#   <registry>/display-operator-cli.
# liken's CLI takes the image of the DaemonSet's first container
# (display-operator) and pulls its -cli image at the same tag, so the -cli
# image is only ever built here, beside the others, at their tag.
#
# The tag defaults to the binaries' version (libdisplay.__version__), the
# tag overlays/release sets. The PEXes come from `pants package` of the
# four binaries (dist/<binary>/<binary>.pex). No registry is reachable to
# pull a base image, so the bases are Debian root filesystems made with
# mmdebstrap from the host's apt sources (trixie for the compositor, bookworm
# for the rest) and imported into podman as localhost/display-base-<name>:<suite>;
# each is made once and reused. Needs mmdebstrap and podman
# (apt-get install mmdebstrap podman).
#
# usage: deploy/images/build.sh [--registry REGISTRY] [--tag TAG] [--dry-run]
#   --dry-run prints the commands instead of running them.
# libddcutil4 is in the cli base for its offline capabilities parser (smoke.py compares it).
# openssl is in the capture base because capture makes its start-up TLS leaf
# with the openssl command.
set -euo pipefail

registry=ghcr.io/liken-sh
tag=""
dry_run=false
while [[ $# -gt 0 ]]; do
  case "$1" in
    --registry) registry=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --dry-run) dry_run=true; shift ;;
    -h|--help) sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
done

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
images="$repo_root/deploy/images"
if [[ -z $tag ]]; then
  tag=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$repo_root/libdisplay/__init__.py")
  [[ -n $tag ]] || { echo "build.sh: no __version__ in libdisplay/__init__.py" >&2; exit 1; }
fi
sources=${DEBIAN_SOURCES:-/etc/apt/sources.list.d/debian.sources}
# podman's settings for these machines, unless the caller has its own.
export CONTAINERS_CONF=${CONTAINERS_CONF:-$images/podman/containers.conf}
export CONTAINERS_STORAGE_CONF=${CONTAINERS_STORAGE_CONF:-$images/podman/storage.conf}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

run() {
  if $dry_run; then
    printf '%q ' "$@"
    printf '\n'
  else
    "$@"
  fi
}

# The Debian packages of each base, and its suite. The compositor's bases are
# trixie, for weston 14 (libseat's noop backend, require-outputs); the others
# stay on bookworm, whose python3.11 the PEXes are built for (their grpcio and
# other compiled wheels are cp311). The images call python3.N by path: it
# installs no `python3` name.
declare -A base_packages=(
  [python]="python3.11"
  [operator]="python3.11,weston,wayland-utils"
  [weston]="python3.13,weston,wayland-utils"
  [weston-build]="gcc,libc6-dev,pkg-config,libweston-14-dev,weston-dev,libwayland-dev,libwayland-bin"
  [ffmpeg]="python3.11,ffmpeg,openssl,intel-media-va-driver,i965-va-driver,mesa-va-drivers"
  [cli]="python3.11,weston,wayland-utils,edid-decode,ddcutil,libddcutil4"
)
declare -A base_suite=(
  [python]=bookworm [operator]=bookworm [weston]=trixie [weston-build]=trixie
  [ffmpeg]=bookworm [cli]=bookworm
)

# What a runtime base keeps after images/prune.py (a customize hook): the files its
# containers run or dlopen(); the packages whose shared objects none of them loads go
# (deploy/README.md, "Image weight"). The python base holds nothing to prune (python3.11
# and the essential set); build-only bases and the cli base are not pruned.
lib=/usr/lib/x86_64-linux-gnu
prune_args() {
  local python
  python=$(grep -o 'python3\.[0-9]*' <<<"${base_packages[$1]}" | head -n 1)
  [[ -n $python ]] || return 0
  local keep=("/usr/bin/$python" "/usr/lib/$python/lib-dynload/*.so")
  case $1 in
    weston)
      # The backends and plugins the pod never loads (RDP, VNC, PipeWire, remoting) carry
      # the codec and streaming stacks; weston-simple-shm stays for the consumer smoke.
      keep+=(/usr/bin/weston /usr/bin/wayland-info /usr/bin/weston-simple-shm
        "$lib/libweston-14/*.so" "$lib/weston/*.so" "$lib/gbm/*.so" "$lib/libEGL_mesa.so.0")
      printf '%q ' --keep "${keep[@]}" \
        --drop "$lib/libweston-14/rdp-backend.so" "$lib/libweston-14/vnc-backend.so" \
        "$lib/libweston-14/pipewire-*.so" "$lib/libweston-14/remoting-plugin.so" \
        --purge iso-codes shared-mime-info \
        --protect "$python" "lib$python-stdlib" weston libweston-14-0 wayland-utils ;;
    ffmpeg)
      keep+=(/usr/bin/ffmpeg /usr/bin/openssl "$lib/dri/*_drv_video.so")
      printf '%q ' --keep "${keep[@]}" --purge shared-mime-info \
        --protect "$python" "lib$python-stdlib" ffmpeg openssl intel-media-va-driver \
        i965-va-driver mesa-va-drivers ;;
  esac
}

# The host's sources name bookworm's suites; a trixie base takes the same
# mirrors with the suite names changed (bookworm's keyring holds trixie's keys).
sources_for() {
  if [[ $1 == bookworm ]]; then
    echo "$sources"
  else
    sed "s/\bbookworm\b/$1/g" "$sources" >"$work/$1.sources"
    echo "$work/$1.sources"
  fi
}

# A base is tagged with its suite and a digest of what makes it, so a changed
# package list makes a new base and an unchanged one is reused.
base() {
  local name=$1 suite=${base_suite[$1]} digest prune
  prune=$(prune_args "$name")
  local python=${prune:+$(grep -o 'python3\.[0-9]*' <<<"${base_packages[$name]}" | head -n 1)}
  digest=$( (printf '%s\n' "$suite" "${base_packages[$name]}" ${prune:+"$prune"}
             # (a test's sandbox may hold build.sh without it: its plan only names bases)
             [[ -z $prune || ! -f $images/prune.py ]] || cat "$images/prune.py") \
           | sha256sum | cut -c1-12)
  local image="localhost/display-base-$name:$suite-$digest"
  if ! $dry_run && podman image exists "$image"; then
    echo "$image"
    return
  fi
  local rootfs
  rootfs="$work/base-$name.tar"
  run mmdebstrap --variant=essential --include="${base_packages[$name]}" \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    ${prune:+--customize-hook="copy-in $images/prune.py /tmp"} \
    ${prune:+--customize-hook="chroot \"\$1\" /usr/bin/$python /tmp/prune.py $prune"} \
    ${prune:+--customize-hook='rm -f "$1/tmp/prune.py"'} \
    "$suite" "$rootfs" "$(sources_for "$suite")" >&2
  run podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin' \
    "$rootfs" "$image" >&2
  rm -f "$rootfs"
  echo "$image"
}

if ! $dry_run; then
  for binary in declare westonctl draplugin capture; do
    pex="$repo_root/dist/$binary/$binary.pex"
    [[ -f $pex ]] || {
      echo "build.sh: $pex is missing; run ./pants package $binary:$binary" >&2
      exit 1
    }
  done
fi

python_base=$(base python)
operator_base=$(base operator)
weston_base=$(base weston)
build_base=$(base weston-build)
ffmpeg_base=$(base ffmpeg)
cli_base=$(base cli)

run podman build -f "$images/declare/Dockerfile" \
  --build-arg BASE_IMAGE="$python_base" \
  -t "$registry/display-declare:$tag" "$repo_root"
run podman build -f "$images/weston/Dockerfile" \
  --build-arg BUILD_IMAGE="$build_base" --build-arg BASE_IMAGE="$weston_base" \
  -t "$registry/display-weston:$tag" "$repo_root"
run podman build -f "$images/operator/Dockerfile" \
  --build-arg BASE_IMAGE="$operator_base" \
  -t "$registry/display-operator:$tag" "$repo_root"
run podman build -f "$images/capture/Dockerfile" \
  --build-arg BASE_IMAGE="$ffmpeg_base" \
  -t "$registry/display-capture:$tag" "$repo_root"
run podman build -f "$images/cli/Dockerfile" \
  --build-arg BASE_IMAGE="$cli_base" \
  -t "$registry/display-operator-cli:$tag" "$repo_root"
