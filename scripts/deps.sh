#!/bin/sh
# scripts/deps.sh — install the Debian packages sluice builds and tests with.
#
# Usage: scripts/deps.sh [bench|fuzz]. Runs apt-get only for what pkg-config (or
# PATH) cannot already find, so a machine that has everything is left alone
# and the call costs milliseconds.
set -eu

missing=""
need_pc() { pkg-config --exists "$1" 2>/dev/null || missing="$missing $2"; }
need_cmd() { command -v "$1" >/dev/null 2>&1 || missing="$missing $2"; }

need_cmd pkg-config pkg-config
need_cmd gcc gcc
need_cmd make make
if command -v pkg-config >/dev/null 2>&1; then
  need_pc libcurl libcurl4-openssl-dev
  need_pc libmicrohttpd libmicrohttpd-dev
  need_pc jansson libjansson-dev
  need_pc rdkafka librdkafka-dev
  need_pc libzstd libzstd-dev
  need_pc lua5.4 liblua5.4-dev
  need_pc cmocka libcmocka-dev
  need_pc libcrypto libssl-dev
else
  missing="$missing libcurl4-openssl-dev libmicrohttpd-dev libjansson-dev librdkafka-dev"
  missing="$missing libzstd-dev liblua5.4-dev libcmocka-dev libssl-dev"
fi
need_cmd kcat kcat
# tests/unit/test_sigv4.c checks the SigV4 signer against botocore's.
/usr/bin/python3 -I -c 'import botocore' 2>/dev/null || missing="$missing python3-botocore"
# tests/integration/test_aws_api.sh drives sluice's EventBridge API with
# Debian's AWS CLI (called by its path: another aws may come first on PATH)
# and boto3.
[ -x /usr/bin/aws ] || missing="$missing awscli"
/usr/bin/python3 -I -c 'import boto3' 2>/dev/null || missing="$missing python3-boto3"
need_cmd curl curl
need_cmd openssl openssl # tests make self-signed certificates (the Kafka listener's TLS)
need_cmd python3 python3
# tests/integration/test_kafka_clients.sh runs real Kafka clients against
# sluice: kafka-python and confluent-kafka (-I: the repository's kafka/ folder
# would otherwise pass for kafka-python), and kafkajs, which it installs
# with npm into build/rel/npm-kafkajs.
/usr/bin/python3 -I -c 'import kafka' 2>/dev/null || missing="$missing python3-kafka"
/usr/bin/python3 -I -c 'import confluent_kafka' 2>/dev/null || missing="$missing python3-confluent-kafka"
need_cmd node nodejs
need_cmd npm npm
need_cmd valgrind valgrind # make soak runs the integration tests under it
# The web console's test (tests/integration/test_ui.c) drives headless Chromium.
need_cmd chromium chromium
# tests/integration/test_metrics.c lints GET /metrics with Prometheus' own checker.
need_cmd promtool prometheus
# Schedules read time zones from the tz database (core/base/tz.h); the tests use
# Europe/Paris, America/New_York and others.
[ -f /usr/share/zoneinfo/Europe/Paris ] || missing="$missing tzdata"
# `scripts/deps.sh bench` (make bench): also the load generator and the chart
# tool, which `make test` does not need.
if [ "${1:-}" = bench ]; then
  need_cmd wrk wrk
  need_cmd gnuplot gnuplot-nox
fi
# `scripts/deps.sh fuzz` (make fuzz): clang and its libFuzzer runtime; `make test`
# replays the fuzz inputs with gcc and needs neither.
if [ "${1:-}" = fuzz ]; then
  need_cmd clang clang
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-"$(uname -m)".a >/dev/null 2>&1 ||
    missing="$missing libclang-rt-14-dev"
fi

[ -z "$missing" ] && exit 0

echo "deps.sh: installing:$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
