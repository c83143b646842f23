#!/usr/bin/env bash
# Installs, with apt-get, the system packages the build, the tests and the
# benchmarks need, when they are missing:
#   libclang-dev      rocksdb's bindgen
#   protobuf-compiler etcd-client (benchmarks against etcd)
#   libprotobuf-dev   the well-known .proto files etcd-client's protos import
#                     (protobuf-compiler only recommends it)
#   etcd-server       the etcd baseline of the store benchmark
#   setpriv           (util-linux; its own package on older Debian) the
#                     process runtime's user switch, capability bounding
#                     and no_new_privs for containers
# and, with pip, the Python `kubernetes` client (orchestra-core's
# tests/core/python.rs drives it against the API server).
set -euo pipefail

if ! python3 -c 'import kubernetes' 2>/dev/null; then
  echo "installing the Python kubernetes client" >&2
  python3 -m pip install --quiet kubernetes 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages kubernetes
fi

missing=()
for pkg in libclang-dev protobuf-compiler libprotobuf-dev etcd-server; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done
if ! command -v setpriv >/dev/null 2>&1; then
  # Debian up to bullseye ships setpriv on its own; later in util-linux.
  if apt-cache show setpriv >/dev/null 2>&1; then missing+=(setpriv); else missing+=(util-linux); fi
fi
[ ${#missing[@]} -eq 0 ] && exit 0

echo "installing missing packages: ${missing[*]}" >&2
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
