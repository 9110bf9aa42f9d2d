# The CDC processor: Python 3.11, Java 17, the package at constraints.txt's versions, the pinned
# jars. The jars are resolved by Maven in a stage of their own: the image that runs has no Maven,
# no JDK, no build tools, and runs as an unprivileged user.
FROM maven:3.9-eclipse-temurin-17 AS jars
WORKDIR /build
COPY pom.xml ./
COPY .mvn ./.mvn
RUN mvn -B -q -P spark dependency:copy-dependencies -DoutputDirectory=jars/spark

FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
# The data folders exist in the image, owned by the job's user: Docker gives a new named volume
# the ownership of the folder it is mounted on.
RUN useradd --create-home --uid 10001 cdc \
 && mkdir -p /data/warehouse /data/checkpoints /data/landing /app \
 && chown -R cdc:cdc /data /app
WORKDIR /app
COPY --from=jars /build/jars/spark ./jars/spark
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY streaming ./streaming
COPY connectors ./connectors
COPY cdc.docker.yaml ./
RUN pip install --no-cache-dir -c constraints.txt .
# CDC_CONFIG also serves `docker compose exec cdc cdc publish|results|show …`.
ENV CDC_SPARK__JARS_DIR=/app/jars/spark \
    CDC_CONFIG=/app/cdc.docker.yaml
USER cdc
EXPOSE 9464
CMD ["cdc", "run", "--config", "/app/cdc.docker.yaml"]
