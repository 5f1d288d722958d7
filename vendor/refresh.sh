#!/usr/bin/env bash
# Refresh the vendored browser files from the lock file: `make vendor`.
# npm installs exactly package-lock.json's versions (install scripts off: .npmrc) into a throwaway folder, and the
# built files the docs pages load are copied into app/api/ui/vendor/ with a manifest of their versions and digests
# (tests/api/test_vendored.py checks both). node_modules never enters the repository.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
target="$here/../app/api/ui/vendor"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$work/"
(cd "$work" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)

# package: file in the package -> file served under /docs/assets/
files=(
    "swagger-ui-dist:swagger-ui-bundle.js:swagger-ui-bundle.js"
    "swagger-ui-dist:swagger-ui.css:swagger-ui.css"
    "swagger-ui-dist:favicon-32x32.png:favicon-32x32.png"
    "swagger-ui-dist:LICENSE:swagger-ui.LICENSE"
    "redoc:bundles/redoc.standalone.js:redoc.standalone.js"
    "redoc:LICENSE:redoc.LICENSE"
)
rm -rf "$target"
mkdir -p "$target"
for entry in "${files[@]}"; do
    IFS=: read -r package source served <<<"$entry"
    cp "$work/node_modules/$package/$source" "$target/$served"
done
# A bundle's last line may name a source map that is not shipped: drop that line (only a whole line), so that a
# browser's developer tools do not ask forklog for it.
for served in swagger-ui-bundle.js swagger-ui.css redoc.standalone.js; do
    sed -i -e '/^\/\/# sourceMappingURL=[^ ]*$/d' -e '/^\/\*# sourceMappingURL=[^ ]*\*\/$/d' "$target/$served"
done

# ReDoc's side menu shows its vendor's logo from their CDN: the one thing either bundle would load from another host.
# Point it at an empty inline image instead (the component hides itself when the image does not load).
logo='src:"https://cdn.redoc.ly/redoc/logo-mini.svg"'
grep -qF "$logo" "$target/redoc.standalone.js" || { echo "refresh.sh: ReDoc's logo URL moved; check the bundle" >&2; exit 1; }
sed -i "s|$logo|src:\"data:,\"|" "$target/redoc.standalone.js"

python3 - "$work" "$target" "${files[@]}" <<'PY'
import hashlib, json, pathlib, sys
work, target, entries = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), sys.argv[3:]
lock = json.loads((work / "package-lock.json").read_text())["packages"]
manifest = {"packages": {}, "files": {}}
for entry in entries:
    package, _source, served = entry.split(":")
    manifest["packages"][package] = {
        "version": lock[f"node_modules/{package}"]["version"],
        "integrity": lock[f"node_modules/{package}"]["integrity"],
    }
    data = (target / served).read_bytes()
    manifest["files"][served] = {"package": package, "sha256": hashlib.sha256(data).hexdigest()}
(target / "VENDORED.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
PY
echo "vendored into $target:"
ls -l "$target"
