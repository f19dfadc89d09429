#!/usr/bin/env bash
# Makes sure a Chromium (or Chrome) browser that the web UI's end-to-end
# test (test/ui) drives headless is installed, and prints its path. It looks
# for chromium, chromium-browser, google-chrome and google-chrome-stable on
# PATH, then /usr/bin/chromium, in that order, as test/ui does; when none is
# there and it runs as root, it installs Debian's chromium package (without
# recommended packages), running apt-get update first only when the package
# lists do not know the package. It is idempotent and starts no browser.
# Without root and without a browser it fails, saying what to install.
set -euo pipefail

# find_browser prints the first browser found, or fails.
find_browser() {
  local name p
  for name in chromium chromium-browser google-chrome google-chrome-stable; do
    if p=$(command -v "$name" 2>/dev/null); then
      echo "$p"
      return 0
    fi
  done
  if [ -x /usr/bin/chromium ]; then
    echo /usr/bin/chromium
    return 0
  fi
  return 1
}

if path=$(find_browser); then
  echo "$path"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-chromium: no chromium, chromium-browser or google-chrome on PATH and no /usr/bin/chromium;" >&2
  echo "install one as root (Debian: apt-get install --no-install-recommends chromium) or run this script as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# apt-cache knows the package only once the lists were fetched.
if ! apt-cache show chromium >/dev/null 2>&1; then
  echo "ensure-chromium: apt-get update" >&2
  apt-get update >&2
fi
echo "ensure-chromium: apt-get install chromium" >&2
# Wait for a dpkg lock another installer holds rather than fail at once.
apt-get install -y --no-install-recommends -o DPkg::Lock::Timeout=600 chromium >&2

if ! path=$(find_browser); then
  echo "ensure-chromium: the chromium package is installed but no browser binary was found (looked for chromium, chromium-browser, google-chrome, /usr/bin/chromium)" >&2
  exit 1
fi
echo "$path"
