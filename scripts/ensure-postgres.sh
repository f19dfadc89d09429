#!/usr/bin/env bash
# Makes sure the PostgreSQL server binaries (initdb, postgres, pg_ctl) that
# the tests of connectors/postgres start through internal/pgtest are
# installed, and prints their directory. It looks in
# /usr/lib/postgresql/<version>/bin (Debian's layout; the newest version
# wins, as internal/pgtest picks it); when none is there and it runs as
# root, it installs Debian's postgresql package, running apt-get update
# first only when the package lists do not know the package. It is
# idempotent and never starts a server. Without root and without the
# binaries it fails, saying what to install.
set -euo pipefail

# find_bin prints the newest /usr/lib/postgresql/*/bin holding all three
# binaries, or fails.
find_bin() {
  local d
  for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
    if [ -x "$d/initdb" ] && [ -x "$d/postgres" ] && [ -x "$d/pg_ctl" ]; then
      echo "$d"
      return 0
    fi
  done
  return 1
}

if dir=$(find_bin); then
  echo "$dir"
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-postgres: no PostgreSQL server binaries (initdb, postgres, pg_ctl) in /usr/lib/postgresql/*/bin;" >&2
  echo "install them as root (Debian/Ubuntu: apt-get install postgresql) or run this script as root" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
# The tests start their own clusters; keep the package from creating and
# starting a "main" cluster on port 5432 (postgresql-common reads this
# directory when the package's postinst runs).
mkdir -p /etc/postgresql-common/createcluster.d
if [ ! -e /etc/postgresql-common/createcluster.d/weir-no-main-cluster.conf ]; then
  echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/weir-no-main-cluster.conf
fi
# apt-cache knows the package only once the lists were fetched.
if ! apt-cache show postgresql >/dev/null 2>&1; then
  echo "ensure-postgres: apt-get update" >&2
  apt-get update >&2
fi
echo "ensure-postgres: apt-get install postgresql" >&2
apt-get install -y --no-install-recommends -o Dpkg::Options::=--force-confold postgresql >&2

if ! dir=$(find_bin); then
  echo "ensure-postgres: the postgresql package is installed but /usr/lib/postgresql/*/bin lacks initdb, postgres or pg_ctl" >&2
  exit 1
fi
echo "$dir"
