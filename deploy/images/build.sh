#!/usr/bin/env bash
# Builds a release's images with podman, all at one tag:
#   <registry>/display-declare, -weston, -operator, -capture (the pod),
#   <registry>/display-weston-pixman and display-capture-amd (the pod's variants for
#   the CPU renderer and AMD's VA-API encoder, deploy/README.md "Image weight") and
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
# for the rest) and imported into podman as localhost/display-base-<name>:<suite>-<digest>;
# each is made once and reused, two at a time. Needs mmdebstrap and podman
# (apt-get install mmdebstrap podman).
#
# usage: deploy/images/build.sh [--registry REGISTRY] [--tag TAG] [--dry-run]
#   --dry-run prints the commands instead of running them.
# libddcutil4 is in the cli base for its offline capabilities parser (smoke.py compares it).
# openssl is in the capture bases because capture makes its start-up TLS leaf
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
    -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
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
# installs no `python3` name. The capture images hold no Debian ffmpeg (its
# libraries link every codec Debian builds, ~230 MiB): capture/Dockerfile
# compiles ffmpeg 5.1 (bookworm's source package, fetched into ffmpeg-build)
# with only what capture runs, against the x264 and libva of the runtime base.
declare -A base_packages=(
  [python]="python3.11"
  [operator]="python3.11,libstdc++6,weston,wayland-utils"
  [weston]="python3.13,weston,wayland-utils"
  [weston-gl]="python3.13,weston,wayland-utils"
  [weston-build]="gcc,libc6-dev,pkg-config,libweston-14-dev,weston-dev,libwayland-dev,libwayland-bin"
  [ffmpeg-build]="apt,gcc,libc6-dev,make,nasm,pkg-config,dpkg-dev,libx264-dev,libva-dev"
  [capture]="python3.11,openssl,libx264-164,libva2,libva-drm2,intel-media-va-driver,i965-va-driver"
  [capture-amd]="python3.11,openssl,libx264-164,libva2,libva-drm2,intel-media-va-driver,i965-va-driver,mesa-va-drivers"
  [cli]="python3.11,weston,wayland-utils,edid-decode,ddcutil,libddcutil4"
)
declare -A base_suite=(
  [python]=bookworm [operator]=bookworm [weston]=trixie [weston-gl]=trixie
  [weston-build]=trixie [ffmpeg-build]=bookworm [capture]=bookworm [capture-amd]=bookworm
  [cli]=bookworm
)
# The source package a build base holds in /usr/src (apt-get source --download-only; its
# suite's deb-src), for a Dockerfile's build stage, which has no network.
declare -A base_source=([ffmpeg-build]=ffmpeg)

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
  # Backends and plugins the pod never loads: RDP, VNC, PipeWire and remoting carry the
  # codec and streaming stacks, colord's CMS plugin D-Bus and GLib.
  local weston14_unused=("$lib/libweston-14/rdp-backend.so" "$lib/libweston-14/vnc-backend.so"
    "$lib/libweston-14/pipewire-*.so" "$lib/libweston-14/remoting-plugin.so")
  case $1 in
    weston|weston-gl)
      # weston-simple-shm stays for the consumer smoke. The weston-gl base (display-weston,
      # which the DaemonSet runs with WESTON_RENDERER=gl) keeps gl-renderer.so and Mesa's
      # EGL/GBM drivers; the weston base (display-weston-pixman, overlays/pixman-renderer)
      # drops gl-renderer.so, so nothing loads Mesa, and with it go libgallium, LLVM and z3.
      keep+=(/usr/bin/weston /usr/bin/wayland-info /usr/bin/weston-simple-shm)
      local drop=("${weston14_unused[@]}")
      if [[ $1 == weston-gl ]]; then
        keep+=("$lib/gbm/*.so" "$lib/libEGL_mesa.so.0")
      else
        drop+=("$lib/libweston-14/gl-renderer.so")
      fi
      keep+=("$lib/libweston-14/*.so" "$lib/weston/*.so")
      printf '%q ' --keep "${keep[@]}" --drop "${drop[@]}" \
        --purge iso-codes shared-mime-info \
        --protect "$python" "lib$python-stdlib" weston libweston-14-0 wayland-utils ;;
    operator)
      # bookworm's weston 10, for `wayland-info` and `weston --version` by name: the pixman
      # renderer only, as the weston image runs it. libstdc++ stays for grpcio's extension,
      # which the PEX installs after the prune, so it cannot see the library is loaded.
      keep+=(/usr/bin/weston /usr/bin/wayland-info)
      printf '%q ' --keep "${keep[@]}" "$lib/libweston-10/*.so" "$lib/weston/*.so" \
        --drop "$lib/libweston-10/gl-renderer.so" "$lib/libweston-10/rdp-backend.so" \
        "$lib/libweston-10/remoting-plugin.so" "$lib/libweston-10/pipewire-plugin.so" \
        "$lib/weston/cms-colord.so" \
        --purge shared-mime-info \
        --protect "$python" "lib$python-stdlib" weston libweston-10-0 wayland-utils \
        libstdc++6 ;;
    capture|capture-amd)
      # ffmpeg is compiled in the image's build stage, so what it links is kept by name.
      keep+=(/usr/bin/openssl "$lib/dri/*_drv_video.so")
      local drivers=(intel-media-va-driver i965-va-driver)
      [[ $1 == capture ]] || drivers+=(mesa-va-drivers)
      printf '%q ' --keep "${keep[@]}" \
        --protect "$python" "lib$python-stdlib" openssl libx264-164 libva2 libva-drm2 \
        "${drivers[@]}" ;;
  esac
}

# The host's sources name bookworm's suites; a trixie base takes the same
# mirrors with the suite names changed (bookworm's keyring holds trixie's keys).
# A base that fetches a source package also reads the suite's deb-src.
sources_for() {
  local suite=$1 name=$2 file="$work/$2.sources"
  sed -e "s/\bbookworm\b/$suite/g" \
    -e "${base_source[$name]:+s/^Types: deb\$/Types: deb deb-src/}" "$sources" >"$file"
  echo "$file"
}

base_image() {
  local name=$1 suite=${base_suite[$1]} digest prune
  prune=$(prune_args "$name")
  digest=$( (printf '%s\n' "$suite" "${base_packages[$name]}" ${prune:+"$prune"} \
               ${base_source[$name]:+"source ${base_source[$name]}"}
             # (a test's sandbox may hold build.sh without it: its plan only names bases)
             [[ -z $prune || ! -f $images/prune.py ]] || cat "$images/prune.py") \
           | sha256sum | cut -c1-12)
  echo "localhost/display-base-$name:$suite-$digest"
}

# A base is tagged with its suite and a digest of what makes it, so a changed
# package list makes a new base and an unchanged one is reused.
base() {
  local name=$1 suite=${base_suite[$1]} image prune
  image=$(base_image "$name")
  if ! $dry_run && podman image exists "$image"; then
    echo "$image"
    return
  fi
  prune=$(prune_args "$name")
  local python=${prune:+$(grep -o 'python3\.[0-9]*' <<<"${base_packages[$name]}" | head -n 1)}
  local source=${base_source[$name]:-}
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
    ${source:+--customize-hook="mkdir -p \"\$1/usr/src\" && chroot \"\$1\" sh -c 'cd /usr/src && apt-get source --download-only $source'"} \
    "$suite" "$rootfs" "$(sources_for "$suite" "$name")" >&2
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
  # The missing bases are made two at a time (mmdebstrap waits on the mirror as much as on
  # the CPU); each one's log is printed when it fails.
  started=$SECONDS
  pending=()
  for name in python operator weston weston-gl weston-build ffmpeg-build capture capture-amd \
      cli; do
    podman image exists "$(base_image "$name")" || pending+=("$name")
  done
  declare -A making=()
  for name in "${pending[@]}"; do
    while [[ $(jobs -rp | wc -l) -ge 2 ]]; do wait -n || true; done
    echo "build.sh: making base $name" >&2
    base "$name" >"$work/base-$name.log" 2>&1 &
    making[$name]=$!
  done
  failed=()
  for name in "${!making[@]}"; do
    wait "${making[$name]}" || { failed+=("$name"); cat "$work/base-$name.log" >&2; }
  done
  [[ ${#failed[@]} -eq 0 ]] || { echo "build.sh: bases failed: ${failed[*]}" >&2; exit 1; }
  echo "build.sh: bases made in $((SECONDS - started)) s (${pending[*]:-none missing})" >&2
fi

python_base=$(base python)
operator_base=$(base operator)
weston_base=$(base weston)
weston_gl_base=$(base weston-gl)
build_base=$(base weston-build)
ffmpeg_build=$(base ffmpeg-build)
capture_base=$(base capture)
capture_amd_base=$(base capture-amd)
cli_base=$(base cli)

started=$SECONDS
run podman build -f "$images/declare/Dockerfile" \
  --build-arg BASE_IMAGE="$python_base" \
  -t "$registry/display-declare:$tag" "$repo_root"
run podman build -f "$images/weston/Dockerfile" \
  --build-arg BUILD_IMAGE="$build_base" --build-arg BASE_IMAGE="$weston_gl_base" \
  -t "$registry/display-weston:$tag" "$repo_root"
run podman build -f "$images/operator/Dockerfile" \
  --build-arg BASE_IMAGE="$operator_base" \
  -t "$registry/display-operator:$tag" "$repo_root"
run podman build -f "$images/capture/Dockerfile" \
  --build-arg BUILD_IMAGE="$ffmpeg_build" --build-arg BASE_IMAGE="$capture_base" \
  -t "$registry/display-capture:$tag" "$repo_root"
run podman build -f "$images/cli/Dockerfile" \
  --build-arg BASE_IMAGE="$cli_base" \
  -t "$registry/display-operator-cli:$tag" "$repo_root"
# The variants: the same Dockerfiles on the base without Mesa (overlays/pixman-renderer) and
# on the one with AMD's VA-API driver (overlays/capture-amd); their build stages are the ones
# above, from podman's layer cache.
run podman build -f "$images/weston/Dockerfile" \
  --build-arg BUILD_IMAGE="$build_base" --build-arg BASE_IMAGE="$weston_base" \
  -t "$registry/display-weston-pixman:$tag" "$repo_root"
run podman build -f "$images/capture/Dockerfile" \
  --build-arg BUILD_IMAGE="$ffmpeg_build" --build-arg BASE_IMAGE="$capture_amd_base" \
  -t "$registry/display-capture-amd:$tag" "$repo_root"
$dry_run || echo "build.sh: images built in $((SECONDS - started)) s" >&2
