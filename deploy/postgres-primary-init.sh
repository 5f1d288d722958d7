#!/bin/bash
# Run once by the postgres image when it makes the primary's cluster (docker-compose.yml, profile postgres): lets the
# standby connect for replication, and makes every commit wait for the standby named standby1 (a synchronous
# standby: nothing acknowledged is lost when the primary is).
set -euo pipefail
echo "host replication ${POSTGRES_USER} all scram-sha-256" >> "${PGDATA}/pg_hba.conf"
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER}" --dbname "${POSTGRES_DB}" \
  -c "ALTER SYSTEM SET synchronous_standby_names = 'standby1'"
