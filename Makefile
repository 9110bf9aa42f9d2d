# Everything a fresh machine needs (Python 3.11, Java 17, Maven) is set up by these targets.
#   make demo   set up, then run the petstore demo (the main job, embedded default, once)
#   make test   set up (and fetch the s3a jars, jars/s3, the Kafka Connect + Debezium jars,
#               jars/connect and jars/connect-mariadb, PostgreSQL 15 and MariaDB 10.11), then run
#               the whole test suite (real Spark, Delta, Kafka, a local S3 server, PostgreSQL ->
#               Debezium, MariaDB -> Debezium)
#   make test-s3  the same setup, then only the S3 warehouse test
#   make test-property  the property tests grouped = sequential and SCD2 = reference, deeper and
#               on a new random seed (a release check)

PYTHON  ?= python3.11
VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
MVN     := mvn -B -q
KAFKA_DIR ?= .kafka
KAFKA_PORT ?= 9092

.PHONY: setup lock jars jars-s3 jars-connect postgres mariadb demo test test-s3 test-property test-unit lint docs
.PHONY: kafka-start kafka-stop clean
.PHONY: bench bench-quick bench-soak

setup: $(STAMP) jars

# pyproject.toml gives the ranges a user's install takes; constraints.txt the exact versions of
# development and CI (`make lock` writes it from the venv).
$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "need $(PYTHON)"; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt -e '.[test]'
	@touch $@

lock: $(STAMP)
	{ sed -n 1,2p constraints.txt; $(PY) -m pip freeze --exclude-editable; } > constraints.txt.new
	mv constraints.txt.new constraints.txt

# A folder's stamp counts only while the jars it stands for are there: a stamp left over jars that
# were deleted is removed, and mvn resolves the folder again.
SPARK_JARS := jars/spark/delta-spark_*.jar
KAFKA_JARS := jars/kafka/kafka_*.jar
S3_JARS    := jars/s3/hadoop-aws-*.jar jars/s3/bundle-*.jar
CONNECT_JARS := jars/connect/connect-runtime-*.jar jars/connect/debezium-connector-postgres-*.jar
MARIADB_CONNECT_JARS := jars/connect-mariadb/connect-runtime-*.jar \
	jars/connect-mariadb/debezium-connector-mariadb-*.jar jars/connect-mariadb/mariadb-java-client-*.jar

jars:
	@ls $(SPARK_JARS) >/dev/null 2>&1 || rm -f jars/spark/.resolved
	@ls $(KAFKA_JARS) >/dev/null 2>&1 || rm -f jars/kafka/.resolved
	@$(MAKE) --no-print-directory jars/spark/.resolved jars/kafka/.resolved

jars/spark/.resolved: pom.xml
	rm -rf jars/spark
	$(MVN) -P spark dependency:copy-dependencies -DoutputDirectory=jars/spark
	@ls $(SPARK_JARS) >/dev/null
	@touch $@

jars/kafka/.resolved: pom.xml
	rm -rf jars/kafka
	$(MVN) -P kafka dependency:copy-dependencies -DoutputDirectory=jars/kafka
	@ls $(KAFKA_JARS) >/dev/null
	@touch $@

# The s3a file system (hadoop-aws + the AWS SDK v2 bundle, ~690 MB; 15 s to download and copy
# here): for the S3 warehouse test only, never on the classpath of the other tests or the demo.
jars-s3:
	@ls $(S3_JARS) >/dev/null 2>&1 || rm -f jars/s3/.resolved
	@$(MAKE) --no-print-directory jars/s3/.resolved

jars/s3/.resolved: pom.xml
	rm -rf jars/s3
	$(MVN) -P s3 dependency:copy-dependencies -DoutputDirectory=jars/s3
	@ls $(S3_JARS) >/dev/null
	@touch $@

# Kafka Connect + Debezium's PostgreSQL connector (~40 MB) for the PostgreSQL -> Debezium -> Kafka
# tests (tests/support/kafka_connect.py): a classpath of its own, never Spark's or the broker's.
# The same Connect with Debezium's MariaDB connector in jars/connect-mariadb: Maven Central serves
# that connector at an older Debezium (pom.xml debezium.mariadb.version), so never beside the
# PostgreSQL one's jars.
jars-connect:
	@ls $(CONNECT_JARS) >/dev/null 2>&1 || rm -f jars/connect/.resolved
	@ls $(MARIADB_CONNECT_JARS) >/dev/null 2>&1 || rm -f jars/connect-mariadb/.resolved
	@$(MAKE) --no-print-directory jars/connect/.resolved jars/connect-mariadb/.resolved

jars/connect/.resolved: pom.xml
	rm -rf jars/connect
	$(MVN) -P connect dependency:copy-dependencies -DoutputDirectory=jars/connect
	@ls $(CONNECT_JARS) >/dev/null
	@touch $@

jars/connect-mariadb/.resolved: pom.xml
	rm -rf jars/connect-mariadb
	$(MVN) -P connect-mariadb dependency:copy-dependencies -DoutputDirectory=jars/connect-mariadb
	@ls $(MARIADB_CONNECT_JARS) >/dev/null
	@touch $@

# PostgreSQL 15 server binaries for the Debezium tests (tests/support/postgres.py starts a
# throwaway cluster with them): the Debian package postgresql-15, installed here when missing
# (as root only; otherwise install it yourself).
PG_BIN ?= /usr/lib/postgresql/15/bin
postgres:
	@test -x $(PG_BIN)/initdb || { \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update && apt-get install -y postgresql-15; \
		else \
			echo "need PostgreSQL 15 in $(PG_BIN): install the Debian package postgresql-15" \
				"(apt-get install postgresql-15, as root)"; exit 1; \
		fi; }
	@test -x $(PG_BIN)/initdb || { echo "no $(PG_BIN)/initdb after installing postgresql-15"; exit 1; }

# MariaDB 10.11 for the MariaDB -> Debezium tests (tests/support/mariadb.py starts a throwaway
# server with it): the Debian package mariadb-server (MySQL itself is not in Debian's archive),
# installed here when missing (as root only; otherwise install it yourself). Its service is not
# started: the tests run their own server.
MARIADBD ?= /usr/sbin/mariadbd
mariadb:
	@test -x $(MARIADBD) || { \
		if [ "$$(id -u)" = 0 ]; then \
			apt-get update && apt-get install -y mariadb-server; \
		else \
			echo "need MariaDB in $(MARIADBD): install the Debian package mariadb-server" \
				"(apt-get install mariadb-server, as root)"; exit 1; \
		fi; }
	@test -x $(MARIADBD) || { echo "no $(MARIADBD) after installing mariadb-server"; exit 1; }

demo: setup
	$(VENV)/bin/cdc demo

# The fast tests first (no Spark: a broken core fails in seconds), then the integration tests, a
# line each with its time (tests/conftest.py) and the 25 slowest listed at the end of the output.
# The S3 tests (marker s3: a local S3 server and `cdc` processes of their own, no shared Spark
# session; much of their time is waiting on the store: s3a's timeouts are 15 s at least) run
# beside the others, in a pytest of their own; their output follows the others' (build/test-s3.log).
test: setup jars-s3 jars-connect postgres mariadb
	$(PY) -m pytest tests/unit tests/bench
	@mkdir -p build
	@$(PY) -m pytest tests/integration -m s3 -v --junit-xml=build/junit-s3.xml \
		> build/test-s3.log 2>&1 & s3=$$!; \
	$(PY) -m pytest tests/integration -m "not s3" -v --durations=25 \
		--junit-xml=build/junit-integration.xml; rest=$$?; \
	wait $$s3; s3rc=$$?; \
	echo "== the S3 tests (run beside the others): build/test-s3.log =="; cat build/test-s3.log; \
	echo "== integration: exit $$rest; S3: exit $$s3rc =="; \
	test $$rest = 0 && test $$s3rc = 0

# The warehouse, checkpoints and landing folders on s3a against a local S3 server
# (tests/integration/test_s3_warehouse.py). A pytest run without jars/s3 deselects it.
test-s3: setup jars-s3
	$(PY) -m pytest -m s3 tests/integration/test_s3_warehouse.py

# grouped = sequential (tests/integration/test_grouped_equals_sequential.py) with PROPERTY_EXAMPLES
# times the sequences and MERGEs of `make test`, and the SCD2 tables = the reference over history
# (tests/integration/test_scd2.py) with 4 x PROPERTY_EXAMPLES batches of 2-6 random transactions
# per scenario instead of `make test`'s fixed workloads; on a new random seed (printed; `make
# test-property PROPERTY_SEED=<n>` repeats a run). A release check, not part of `make test`.
PROPERTY_EXAMPLES ?= 5
test-property: setup
	PROPERTY_EXAMPLES=$(PROPERTY_EXAMPLES) $(PY) -m pytest -rP \
		tests/integration/test_grouped_equals_sequential.py tests/integration/test_scd2.py

test-unit: $(STAMP)
	$(PY) -m pytest tests/unit tests/bench

lint: $(STAMP)
	$(VENV)/bin/ruff check streaming connectors tests bench
	$(VENV)/bin/ruff format --check streaming connectors tests bench docs
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports

docs: $(STAMP)
	$(VENV)/bin/cdc config-reference --output docs/config.md

kafka-start: setup
	$(PY) -m tests.support.kafka_broker start --dir $(KAFKA_DIR) --port $(KAFKA_PORT)

kafka-stop: $(STAMP)
	$(PY) -m tests.support.kafka_broker stop --dir $(KAFKA_DIR)

clean:
	rm -rf $(VENV) jars .pytest_cache .mypy_cache .ruff_cache

# Benchmarks (BENCHMARKS.md): ours vs naive MERGE per transaction, blind append and delta-rs,
# side by side in one run; prints a table and writes bench/results.json.
bench: setup
	$(PY) -m bench

bench-quick: setup
	$(PY) -m bench --quick

# Issue 36: `cdc run` for SOAK_BATCHES micro-batches (1 s trigger, ~8 small transactions/s; ~50
# min for 1,000 here), reported per tenth: batch time, the driver's memory, files per table,
# the checkpoint; then exactly-once checked. `SOAK_BATCHES=100 make bench-soak` for a short one.
SOAK_BATCHES ?= 1000
bench-soak: setup
	$(PY) -m bench --workloads Soak --soak-batches $(SOAK_BATCHES)
