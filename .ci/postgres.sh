# shellcheck shell=bash
# A throwaway PostgreSQL server on 127.0.0.1 for the tests that need one (tests/compat: the SQL
# trajectory sink against a real server). Sourced by .ci/run; usable by hand too:
#
#     source .ci/postgres.sh && start_test_postgres && .venv/bin/python -m pytest tests/compat
#
# start_test_postgres installs Debian's `postgresql` when it is missing (apt-get, as root or with
# passwordless sudo), creates a fresh cluster in a temporary directory (trust auth, a free port,
# fsync off: test data only), starts it, exports RLAIF_TEST_POSTGRES_URL and installs an EXIT trap
# that stops the server and deletes the directory. It never fails its caller: when something is
# missing it prints why and returns, and the tests then skip with that reason. An
# RLAIF_TEST_POSTGRES_URL already set is used as it is.

PG_TEST_DIR=""
PG_TEST_BIN=""
PG_TEST_AS=""

_pg_bindir() {
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        if [ -x "$dir/pg_ctl" ] && [ -x "$dir/initdb" ]; then
            echo "$dir"
        fi
    done | sort -V | tail -n 1
}

start_test_postgres() {
    if [ -n "${RLAIF_TEST_POSTGRES_URL:-}" ]; then
        echo "postgres: using RLAIF_TEST_POSTGRES_URL from the environment"
        return 0
    fi
    local sudo="" bindir port
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            sudo="sudo -n"
        fi
    fi
    bindir=$(_pg_bindir)
    if [ -z "$bindir" ]; then
        if ! command -v apt-get >/dev/null 2>&1; then
            echo "postgres: skipped (not installed, and no apt-get to install it)"
            return 0
        fi
        if [ "$(id -u)" != 0 ] && [ -z "$sudo" ]; then
            echo "postgres: skipped (not installed; installing needs root or passwordless sudo)"
            return 0
        fi
        echo "postgres: installing Debian's postgresql"
        if ! { $sudo apt-get update -qq >/dev/null 2>&1 \
               && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends postgresql \
                  >/dev/null 2>&1; }; then
            echo "postgres: skipped (apt-get install postgresql failed)"
            return 0
        fi
        bindir=$(_pg_bindir)
        if [ -z "$bindir" ]; then
            echo "postgres: skipped (postgresql installed, but no server binaries under /usr/lib/postgresql)"
            return 0
        fi
    fi
    # initdb and postgres refuse to run as root: as root, run them as the postgres user.
    if [ "$(id -u)" = 0 ]; then
        if ! id postgres >/dev/null 2>&1; then
            echo "postgres: skipped (running as root and there is no postgres user to run the server)"
            return 0
        fi
        PG_TEST_AS="runuser -u postgres --"
    fi
    PG_TEST_DIR=$(mktemp -d /tmp/rlaif-test-pg.XXXXXX)
    if [ "$(id -u)" = 0 ]; then
        chown postgres "$PG_TEST_DIR"
    fi
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    if ! $PG_TEST_AS "$bindir/initdb" -D "$PG_TEST_DIR/data" -U postgres -A trust --no-sync \
            >"$PG_TEST_DIR/initdb.log" 2>&1; then
        echo "postgres: skipped (initdb failed: $(tail -n 2 "$PG_TEST_DIR/initdb.log" | tr '\n' ' '))"
        rm -rf "$PG_TEST_DIR"
        return 0
    fi
    if ! $PG_TEST_AS "$bindir/pg_ctl" -D "$PG_TEST_DIR/data" -l "$PG_TEST_DIR/server.log" -w -t 60 \
            -o "-p $port -k $PG_TEST_DIR -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null 2>&1; then
        echo "postgres: skipped (the server did not start: $(tail -n 2 "$PG_TEST_DIR/server.log" | tr '\n' ' '))"
        rm -rf "$PG_TEST_DIR"
        return 0
    fi
    PG_TEST_BIN=$bindir
    trap stop_test_postgres EXIT
    export RLAIF_TEST_POSTGRES_URL="postgresql://postgres@127.0.0.1:$port/postgres"
    echo "postgres: test server running on 127.0.0.1:$port (RLAIF_TEST_POSTGRES_URL)"
}

stop_test_postgres() {
    if [ -n "$PG_TEST_DIR" ] && [ -d "$PG_TEST_DIR/data" ]; then
        $PG_TEST_AS "$PG_TEST_BIN/pg_ctl" -D "$PG_TEST_DIR/data" -m immediate -w stop >/dev/null 2>&1 || true
        rm -rf "$PG_TEST_DIR"  # silent: pytest's summary stays the last line of the CI log
    fi
    PG_TEST_DIR=""
}
