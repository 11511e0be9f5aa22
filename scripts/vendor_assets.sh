#!/usr/bin/env bash
# Vendors the console's and /docs' front-end assets into service/console/static/vendor/
# from the npm registry: each package at a pinned version, its tarball checked against
# the integrity (sha512) pinned here, then only the minified files the pages load and the
# package's licence files copied. Rerun after changing a version (and its integrity,
# printed by `npm view <pkg>@<version> dist.integrity`). Needs npm, tar, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=service/console/static/vendor

# name version integrity files-to-copy (paths inside the package)
packages=(
    "swagger-ui-dist 5.35.0 sha512-U06rpMtW9V3XPGOBeamTUSr0Z09jMX4IJuANpE/EZbAhw0G8CgwrzU4YmXkn/h0wCDNsXdGarTNNHC3sU8yVUQ== swagger-ui-bundle.js swagger-ui.css favicon-32x32.png LICENSE NOTICE swagger-ui-bundle.js.LICENSE.txt"
    "vega 6.4.0 sha512-rHXCq2LpEWCLMjXBEj7hocY9G0/i5TGYRayGGSj06VTF4+l2IG2Z7oeZKCjWbUh/7hTE/mVhbaOPB72wCElh6g== build/vega.min.js LICENSE"
    "vega-lite 6.5.0 sha512-fMXF6s0MrIg0UTWnLIfeFtgSLzVhyzSKobzGrh5rhS+mL6FOYFG3m7ouJ4U23gj65EK+gl9FIIT5w7wLNaAzkA== build/vega-lite.min.js LICENSE"
    "vega-embed 7.3.0 sha512-wQ8s5GaSzqoKgmRfbRolgBrjE2CP7ZKHXqH7NijxMqPjpdWxSs4Dn8tvp9g0giQvh2cK+3p56sxjWWM0wNngGw== build/vega-embed.min.js LICENSE"
)

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
rm -rf "$dest"
mkdir -p "$dest"
{
    echo "Vendored by scripts/vendor_assets.sh from the npm registry (registry.npmjs.org);"
    echo "tarball integrity checked. Package, version, integrity:"
} >"$dest/VERSIONS"
for entry in "${packages[@]}"; do
    read -r name version integrity files <<<"$entry"
    (cd "$work" && npm pack --silent "$name@$version" >/dev/null)
    tgz="$work/$name-$version.tgz"
    actual="sha512-$(python3 -c 'import base64, hashlib, sys; print(base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' "$tgz")"
    if [ "$actual" != "$integrity" ]; then
        echo "integrity mismatch for $name@$version: got $actual" >&2
        exit 1
    fi
    mkdir -p "$work/$name" "$dest/$name"
    tar xzf "$tgz" -C "$work/$name"
    for f in $files; do
        cp "$work/$name/package/$f" "$dest/$name/$(basename "$f")"
    done
    echo "$name $version $integrity" >>"$dest/VERSIONS"
done
echo "vendored into $dest:"
cat "$dest/VERSIONS"
