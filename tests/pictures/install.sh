#!/usr/bin/env bash
# Installs what the picture tests use:
#   - Chromium from Debian's packages (the HTML report is opened in it, headless), and
#     Node.js and npm from Debian when they are missing;
#   - playwright-core from npm, which drives that Chromium (no browser download), in
#     target/pictures/node_modules;
#   - the tensorboard package from PyPI (its event reader checks the tfevents files), in a
#     Python venv at target/pictures/venv.
#
# Idempotent and quick once installed (stamp files), and safe to run from several test
# processes at once (flock). Runs as root for apt-get.
#
# Time on a 2-core machine: about 40 s for chromium from apt, 5 s for playwright-core,
# 20 s for the tensorboard venv on a cold package cache; 0.1 s when everything is in place.
#
# Environment: PICTURES_DIR (default <repo>/target/pictures), PYTHON (default python3).
set -euo pipefail

PLAYWRIGHT_VERSION=1.49.1
TENSORBOARD_VERSION=2.18.0

. "$(dirname "${BASH_SOURCE[0]}")/../install_dir.sh"
install_dir PICTURES_DIR pictures
say() { echo "pictures/install.sh: $*" >&2; }

# --- Chromium (and Node.js when missing) from Debian -----------------------------------------
want=()
command -v chromium >/dev/null 2>&1 || want+=(chromium fonts-dejavu-core)
command -v node >/dev/null 2>&1 || want+=(nodejs)
command -v npm >/dev/null 2>&1 || want+=(npm)
if ((${#want[@]})); then
    say "installing ${want[*]} from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    apt=(apt-get -qq -o DPkg::Lock::Timeout=300)
    "${apt[@]}" update
    "${apt[@]}" install -y --no-install-recommends "${want[@]}" >/dev/null || {
        say "apt-get install ${want[*]} failed"
        exit 1
    }
fi

# --- playwright-core from npm ---------------------------------------------------------------
stamp="$dir/node_modules/.gpuspan-installed"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$PLAYWRIGHT_VERSION" ]]; then
    say "installing playwright-core $PLAYWRIGHT_VERSION"
    (cd "$dir" && npm install --silent --no-audit --no-fund --prefix "$dir" \
        "playwright-core@$PLAYWRIGHT_VERSION" >/dev/null)
    echo "$PLAYWRIGHT_VERSION" >"$stamp"
fi

# --- tensorboard from PyPI ------------------------------------------------------------------
stamp="$venv/.gpuspan-installed"
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$TENSORBOARD_VERSION" ]]; then
    python="${PYTHON:-python3}"
    say "creating $venv with tensorboard $TENSORBOARD_VERSION"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        "tensorboard==$TENSORBOARD_VERSION"
    echo "$TENSORBOARD_VERSION" >"$stamp"
fi
