#!/bin/sh
# Patroni's post_bootstrap (deploy/patroni/patroni.yml): run once, on the node that made the cluster, with a
# connection string of it as $1. It makes forklog's role and database; forklog makes its schema at its first start.
set -eu
psql -v ON_ERROR_STOP=1 -v password="${FORKLOG_DB_PASSWORD:-forklog}" -d "$1" <<'SQL'
CREATE ROLE forklog LOGIN PASSWORD :'password';
CREATE DATABASE forklog OWNER forklog;
SQL
