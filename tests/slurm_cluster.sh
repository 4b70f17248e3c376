#!/usr/bin/env bash
# A two-node Slurm cluster on this one machine, for the tests: Debian's slurm-wlm (22.05) with munge, and slurmdbd on
# MariaDB so that sacct answers.  The two nodes are two slurmd daemons of this host (slurmd -N), so a job on two
# nodes really starts one task on each.  As root.  `make slurm` installs the packages.
#   bash tests/slurm_cluster.sh start   # idempotent: returns 0 once both nodes are idle and sacct answers
#   bash tests/slurm_cluster.sh stop    # stops every daemon it started (the packages stay)
set -u
PREFIX=zb   # node names zb1, zb2; partition "debug" (the default) holds both
CONF=/etc/slurm/slurm.conf

write_conf() {
  local host cpus
  host=$(hostname -s)
  cpus=$(nproc)
  cat > "$CONF" <<CONF
ClusterName=zeroboard
SlurmctldHost=$host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
StateSaveLocation=/var/spool/slurmctld-zeroboard
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
ReturnToService=2
MinJobAge=600
KillWait=10
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
JobAcctGatherType=jobacct_gather/none
NodeName=${PREFIX}1 NodeHostname=$host NodeAddr=127.0.0.1 Port=6818 CPUs=$cpus
NodeName=${PREFIX}2 NodeHostname=$host NodeAddr=127.0.0.1 Port=6828 CPUs=$cpus
PartitionName=debug Nodes=${PREFIX}1,${PREFIX}2 Default=YES MaxTime=INFINITE State=UP
CONF
  cat > /etc/slurm/slurmdbd.conf <<CONF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
LogFile=/var/log/slurm/slurmdbd.log
PidFile=/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=zeroboard-tests
StorageLoc=slurm_acct_db
CONF
  chmod 600 /etc/slurm/slurmdbd.conf
}

wait_for() {  # wait_for SECONDS COMMAND...
  local n=$1; shift
  for _ in $(seq 1 "$((n * 4))"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  return 1
}

start() {
  command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v mariadbd >/dev/null \
    || { echo "Slurm is not installed: run 'make slurm'" >&2; return 1; }
  if sinfo -h -N 2>/dev/null | grep -q "^${PREFIX}2 .*idle" && sacct -n >/dev/null 2>&1; then return 0; fi
  mkdir -p /run/munge /run/mysqld /var/spool/slurmctld-zeroboard /var/spool/slurmd/${PREFIX}1 /var/spool/slurmd/${PREFIX}2 \
    /var/log/slurm
  chown munge:munge /run/munge; chown mysql:mysql /run/mysqld
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 2>/dev/null
  chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged
  if ! mysqladmin ping >/dev/null 2>&1; then
    (setsid mysqld_safe --bind-address=127.0.0.1 >/var/log/slurm/mysqld.log 2>&1 &)
    wait_for 30 mysqladmin ping || { echo "MariaDB did not start" >&2; return 1; }
  fi
  mysql -e "CREATE DATABASE IF NOT EXISTS slurm_acct_db; CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY 'zeroboard-tests'; ALTER USER 'slurm'@'localhost' IDENTIFIED BY 'zeroboard-tests'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost'; FLUSH PRIVILEGES;" || return 1
  write_conf
  pkill -x slurmctld; pkill -x slurmd; pkill -x slurmdbd; sleep 0.5
  slurmdbd
  wait_for 30 sacctmgr -n list cluster || { echo "slurmdbd did not answer" >&2; return 1; }
  sacctmgr -i add cluster zeroboard >/dev/null 2>&1
  slurmctld -c
  slurmd -N ${PREFIX}1
  slurmd -N ${PREFIX}2
  wait_for 60 sh -c "sinfo -h -N | grep -q '^${PREFIX}1 .*idle' && sinfo -h -N | grep -q '^${PREFIX}2 .*idle'" \
    || { echo "the nodes did not come up:" >&2; sinfo -N >&2; tail -5 /var/log/slurm/slurmctld.log >&2; return 1; }
  wait_for 30 sacct -n || { echo "sacct does not answer" >&2; return 1; }
}

stop() {
  scancel --full -u root 2>/dev/null
  pkill -x slurmd; pkill -x slurmctld; pkill -x slurmdbd
  mysqladmin shutdown 2>/dev/null
  pkill -x munged
  return 0
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
