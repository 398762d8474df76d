#!/usr/bin/env bash
# Builds a single-layer OCI image, for one architecture or several, from local files with nothing
# but bash, GNU tar, gzip and sha256sum, as an OCI image-layout tar archive and/or directory: an
# archive `ctr -n k8s.io images import ARCHIVE` imports under --name and `skopeo copy
# oci-archive:ARCHIVE docker://REF` pushes; a directory `crane push DIR REF` pushes. The same inputs
# give the same bytes: entries sorted by name, owned by 0:0 (numeric), mtime 0, no pax headers, gzip
# without name or time, no creation date in the config unless --created gives one.
#
# With one --arch, index.json names the image's manifest; with several, it names one image index
# (application/vnd.oci.image.index.v1+json) whose manifests are the architectures' images, in the
# order given, so pushing the layout pushes the multi-architecture image.
#
# Usage:
#   scripts/oci-archive.sh --name REF (--output FILE | --layout DIR) [options]
#
#   --name REF               image name, e.g. registry.example.com/node-csr-approver:0.1.0. Completed
#                            as containerd's CRI resolves names: `busybox:1.37` becomes
#                            `docker.io/library/busybox:1.37`, a missing tag is `latest`. Written
#                            to index.json as `io.containerd.image.name` (the full name, which
#                            `ctr images import` uses) and `org.opencontainers.image.ref.name` (the tag).
#   --output FILE            the archive to write (replaced atomically)
#   --layout DIR             the image layout as a directory (oci-layout, index.json, blobs/),
#                            replaced whole
#   --file [ARCH=]SRC:DEST[:MODE]
#                            copy file SRC to absolute path DEST, octal MODE (default 0755 when SRC
#                            is executable, else 0644); with ARCH= into that architecture's image
#                            only (e.g. each one's own binary); repeatable
#   --symlink DEST:TARGET    a symbolic link at absolute path DEST pointing at TARGET; repeatable
#   --dir DEST[:MODE]        an empty directory at absolute path DEST, octal MODE (default 0755),
#                            e.g. --dir /tmp:1777; repeatable
#   --user USER              the config's User, e.g. 65532:65532 (default: none, that is root)
#   --entrypoint ARG         appends ARG to the config's Entrypoint; repeatable
#   --cmd ARG                appends ARG to the config's Cmd; repeatable
#   --env KEY=VALUE          appends to the config's Env; repeatable
#   --workdir DIR            the config's WorkingDir (default: none, that is /)
#   --arch ARCH              amd64 or arm64; repeatable (default: this machine's, from `uname -m`)
#   --annotation KEY=VALUE   an annotation of every manifest and of the image index, e.g.
#                            org.opencontainers.image.revision=COMMIT; repeatable
#   --created TIME           the config's `created` (RFC 3339, e.g. from SOURCE_DATE_EPOCH)
#   --compression gzip|none  the layer's compression (default gzip)
#
# Every entry belongs to 0:0. Parent directories of DESTs are added with mode 0755. SRC, DEST and
# TARGET cannot contain ':'. Prints the archive's path (the layout's without --output) as the last
# line of stdout.
set -euo pipefail

die() {
  echo "oci-archive: $*" >&2
  exit 1
}

# A JSON string literal for $1 (quotes, backslashes and control characters escaped).
json_string() {
  local s=$1 out="" c i
  for ((i = 0; i < ${#s}; i++)); do
    c=${s:i:1}
    case ${c} in
      '"') out+='\"' ;;
      \\) out+=\\\\ ;;
      $'\n') out+='\n' ;;
      $'\t') out+='\t' ;;
      $'\r') out+='\r' ;;
      [[:cntrl:]]) out+=$(printf '\\u%04x' "'${c}") ;;
      *) out+=${c} ;;
    esac
  done
  printf '"%s"' "${out}"
}

# A JSON array of strings from the arguments.
json_array() {
  local sep="" item
  printf '['
  for item in "$@"; do
    printf '%s%s' "${sep}" "$(json_string "${item}")"
    sep=,
  done
  printf ']'
}

absolute() {
  [[ $1 == /* && $1 != */../* && $1 != */.. && $1 != / ]] || die "$2: '$1' is not an absolute path below /"
}

octal_mode() {
  [[ $1 =~ ^0?[0-7]{3,4}$ ]] || die "$2: '$1' is not an octal mode"
}

name="" output="" layout_out="" user="" workdir="" compression=gzip created=""
files=() symlinks=() dirs=() entrypoint=() cmd=() env=() archs=() annotations=()
while (($#)); do
  [[ $# -ge 2 ]] || die "$1 needs a value"
  case $1 in
    --name) name=$2 ;;
    --output) output=$2 ;;
    --layout) layout_out=$2 ;;
    --file) files+=("$2") ;;
    --symlink) symlinks+=("$2") ;;
    --dir) dirs+=("$2") ;;
    --user) user=$2 ;;
    --entrypoint) entrypoint+=("$2") ;;
    --cmd) cmd+=("$2") ;;
    --env)
      [[ $2 == ?*=* ]] || die "--env '$2' is not KEY=VALUE"
      env+=("$2")
      ;;
    --workdir) workdir=$2 ;;
    --arch) archs+=("$2") ;;
    --annotation)
      [[ $2 == ?*=* ]] || die "--annotation '$2' is not KEY=VALUE"
      annotations+=("$2")
      ;;
    --created)
      [[ $2 =~ ^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?(Z|[+-][0-9]{2}:[0-9]{2})$ ]] \
        || die "--created '$2' is not an RFC 3339 time"
      created=$2
      ;;
    --compression) compression=$2 ;;
    *) die "unknown option '$1' (see the header of $0)" ;;
  esac
  shift 2
done
[[ -n ${name} ]] || die "--name is required"
[[ -n ${output} || -n ${layout_out} ]] || die "--output or --layout is required"
[[ ${compression} == gzip || ${compression} == none ]] || die "--compression is gzip or none"
if ((${#archs[@]} == 0)); then
  case $(uname -m) in
    x86_64) archs=(amd64) ;;
    aarch64 | arm64) archs=(arm64) ;;
    *) die "no OCI architecture known for $(uname -m): pass --arch" ;;
  esac
fi
declare -A chosen=()
for arch in "${archs[@]}"; do
  [[ ${arch} == amd64 || ${arch} == arm64 ]] || die "--arch is amd64 or arm64, not '${arch}'"
  [[ -z ${chosen[${arch}]:-} ]] || die "--arch ${arch} is given twice"
  chosen[${arch}]=1
done
for spec in "${files[@]}"; do
  if [[ ${spec} =~ ^([a-z0-9]+)= ]]; then
    [[ -n ${chosen[${BASH_REMATCH[1]}]:-} ]] || die "--file '${spec}': ${BASH_REMATCH[1]} is not an --arch built"
  fi
done

# The name as containerd's CRI plugin looks it up (docker.io/library/NAME:latest for NAME).
[[ ${name} != *@* ]] || die "--name '${name}': a digest cannot be chosen, give a tag"
[[ ${name} =~ ^[a-z0-9]([a-zA-Z0-9._:/-]*[a-zA-Z0-9])?$ ]] || die "--name '${name}' is not an image reference"
first=${name%%/*}
if [[ ${name} != */* ]] || [[ ${first} != *.* && ${first} != *:* && ${first} != localhost ]]; then
  [[ ${name} == */* ]] || name=library/${name}
  name=docker.io/${name}
fi
last=${name##*/}
[[ ${last} == *:* ]] || name=${name}:latest
tag=${name##*:}
[[ ${tag} =~ ^[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}$ ]] || die "--name '${name}': tag '${tag}' is not valid"

work="$(mktemp -d)"
partial="" layout_partial=""
[[ -z ${output} ]] || partial="${output}.partial.$$"
[[ -z ${layout_out} ]] || layout_partial="${layout_out%/}.partial.$$"
trap 'rm -rf "${work}" "${partial}" "${layout_partial}"' EXIT
layout="${work}/layout"
mkdir -p "${layout}/blobs/sha256"

# The annotations as a JSON member `"annotations":{...},` (nothing without any).
annotations_member=""
if ((${#annotations[@]})); then
  members=()
  for annotation in "${annotations[@]}"; do
    members+=("$(json_string "${annotation%%=*}"):$(json_string "${annotation#*=}")")
  done
  annotations_member="\"annotations\":{$(IFS=,; echo "${members[*]}")},"
fi

# Moves file $1 into blobs/ and prints its descriptor's "digest" and "size" members.
blob() {
  local digest size
  digest=$(sha256sum "$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  mv "$1" "${layout}/blobs/sha256/${digest}"
  printf '"digest":"sha256:%s","size":%s' "${digest}" "${size}"
}

# Builds architecture $1's image (its rootfs under work/rootfs-ARCH, its layer, config and
# manifest) and prints the manifest's descriptor members "digest" and "size".
image() {
  local arch=$1 rootfs="${work}/rootfs-$1" spec dest mode src target extra
  local -A taken=()
  mkdir "${rootfs}"
  chmod 0755 "${rootfs}"

  # Creates the missing parent directories of rootfs path $1, each with mode 0755.
  parents() {
    local dir missing=()
    dir=$(dirname "$1")
    while [[ ${dir} != / && ! -d ${rootfs}${dir} ]]; do
      missing=("${dir}" "${missing[@]}")
      dir=$(dirname "${dir}")
    done
    for dir in "${missing[@]}"; do
      mkdir "${rootfs}${dir}"
      chmod 0755 "${rootfs}${dir}"
    done
  }
  claim() {
    [[ -z ${taken[$1]:-} ]] || die "$1 is given twice"
    taken[$1]=1
  }

  for spec in "${dirs[@]}"; do
    IFS=: read -r dest mode extra <<<"${spec}"
    [[ -z ${extra} ]] || die "--dir '${spec}' has too many ':'"
    absolute "${dest}" --dir
    claim "${dest}"
    mode=${mode:-0755}
    octal_mode "${mode}" --dir
    parents "${dest}"
    mkdir -p "${rootfs}${dest}"
    chmod "${mode}" "${rootfs}${dest}"
  done
  for spec in "${files[@]}"; do
    if [[ ${spec} =~ ^([a-z0-9]+)=(.*)$ ]]; then
      [[ ${BASH_REMATCH[1]} == "${arch}" ]] || continue
      spec=${BASH_REMATCH[2]}
    fi
    IFS=: read -r src dest mode extra <<<"${spec}"
    [[ -z ${extra} && -n ${dest} ]] || die "--file '${spec}' is not SRC:DEST[:MODE]"
    [[ -f ${src} ]] || die "--file: ${src} is not a file"
    absolute "${dest}" --file
    claim "${dest}"
    if [[ -z ${mode} ]]; then
      if [[ -x ${src} ]]; then mode=0755; else mode=0644; fi
    fi
    octal_mode "${mode}" --file
    parents "${dest}"
    cp "${src}" "${rootfs}${dest}"
    chmod "${mode}" "${rootfs}${dest}"
  done
  for spec in "${symlinks[@]}"; do
    IFS=: read -r dest target extra <<<"${spec}"
    [[ -z ${extra} && -n ${target} ]] || die "--symlink '${spec}' is not DEST:TARGET"
    absolute "${dest}" --symlink
    claim "${dest}"
    parents "${dest}"
    ln -s "${target}" "${rootfs}${dest}"
  done

  # The layer: every entry under rootfs, sorted bytewise, as the tar of a filesystem diff (no ./).
  local layer="${work}/layer-${arch}.tar" layer_type diff_id
  (cd "${rootfs}" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"${work}/entries-${arch}"
  tar --create --file "${layer}" --directory "${rootfs}" --no-recursion --verbatim-files-from \
    --files-from "${work}/entries-${arch}" --format=gnu --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --no-acls --no-xattrs --no-selinux
  diff_id="sha256:$(sha256sum "${layer}" | cut -d' ' -f1)"
  if [[ ${compression} == gzip ]]; then
    gzip -n -9 "${layer}"
    layer="${layer}.gz"
    layer_type=application/vnd.oci.image.layer.v1.tar+gzip
  else
    layer_type=application/vnd.oci.image.layer.v1.tar
  fi
  local layer_descriptor config_descriptor config_members=()
  layer_descriptor=$(blob "${layer}")

  [[ -z ${user} ]] || config_members+=("\"User\":$(json_string "${user}")")
  ((${#env[@]} == 0)) || config_members+=("\"Env\":$(json_array "${env[@]}")")
  ((${#entrypoint[@]} == 0)) || config_members+=("\"Entrypoint\":$(json_array "${entrypoint[@]}")")
  ((${#cmd[@]} == 0)) || config_members+=("\"Cmd\":$(json_array "${cmd[@]}")")
  [[ -z ${workdir} ]] || config_members+=("\"WorkingDir\":$(json_string "${workdir}")")
  printf '{%s"architecture":"%s","os":"linux","config":{%s},"rootfs":{"type":"layers","diff_ids":["%s"]}}' \
    "${created:+\"created\":\"${created}\",}" "${arch}" "$(IFS=,; echo "${config_members[*]}")" "${diff_id}" \
    >"${work}/config-${arch}.json"
  config_descriptor=$(blob "${work}/config-${arch}.json")

  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json",%s},"layers":[{"mediaType":"%s",%s}]%s}' \
    "${config_descriptor}" "${layer_type}" "${layer_descriptor}" "${annotations_member:+,${annotations_member%,}}" \
    >"${work}/manifest-${arch}.json"
  blob "${work}/manifest-${arch}.json"
}

names="\"annotations\":{\"io.containerd.image.name\":$(json_string "${name}"),\"org.opencontainers.image.ref.name\":$(json_string "${tag}")}"
if ((${#archs[@]} == 1)); then
  top_type=application/vnd.oci.image.manifest.v1+json
  top_descriptor=$(image "${archs[0]}")
  platform=",\"platform\":{\"architecture\":\"${archs[0]}\",\"os\":\"linux\"}"
else
  top_type=application/vnd.oci.image.index.v1+json
  entries=()
  for arch in "${archs[@]}"; do
    descriptor=$(image "${arch}")
    entries+=("{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\",${descriptor},\"platform\":{\"architecture\":\"${arch}\",\"os\":\"linux\"}}")
  done
  printf '{"schemaVersion":2,"mediaType":"%s","manifests":[%s]%s}' \
    "${top_type}" "$(IFS=,; echo "${entries[*]}")" "${annotations_member:+,${annotations_member%,}}" >"${work}/index.json"
  top_descriptor=$(blob "${work}/index.json")
  platform=""
fi
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"%s",%s,%s%s}]}' \
  "${top_type}" "${top_descriptor}" "${names}" "${platform}" >"${layout}/index.json"
printf '{"imageLayoutVersion":"1.0.0"}' >"${layout}/oci-layout"
find "${layout}" -type d -exec chmod 0755 {} + && find "${layout}" -type f -exec chmod 0644 {} +

top_digest=${top_descriptor#\"digest\":\"}
top_digest=${top_digest%%\"*}
if [[ -n ${layout_out} ]]; then
  mkdir -p "$(dirname "${layout_partial}")"
  cp -r "${layout}" "${layout_partial}"
  rm -rf "${layout_out}"
  mv "${layout_partial}" "${layout_out}"
  echo "oci-archive: ${name} (linux/$(IFS=,; echo "${archs[*]}"), ${top_digest}) in ${layout_out}/" >&2
fi
if [[ -n ${output} ]]; then
  # The archive: the layout's entries sorted by name, as reproducibly as the layer.
  (cd "${layout}" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"${work}/layout-entries"
  mkdir -p "$(dirname "${output}")"
  tar --create --file "${partial}" --directory "${layout}" --no-recursion --verbatim-files-from \
    --files-from "${work}/layout-entries" --format=gnu --mtime=@0 --owner=0 --group=0 --numeric-owner \
    --no-acls --no-xattrs --no-selinux
  mv "${partial}" "${output}"
  echo "oci-archive: ${name} (linux/$(IFS=,; echo "${archs[*]}"), ${top_digest}) in ${output}" >&2
  realpath "${output}"
else
  realpath "${layout_out}"
fi
