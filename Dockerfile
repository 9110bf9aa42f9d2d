# The CDC processor: Python 3.11, Java 17, the pinned Python packages and the pinned jars.
FROM python:3.11-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless maven \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY pom.xml ./
COPY .mvn ./.mvn
RUN mvn -B -q -P spark dependency:copy-dependencies -DoutputDirectory=jars/spark
COPY pyproject.toml constraints.txt README.md LICENSE ./
COPY streaming ./streaming
COPY connectors ./connectors
COPY cdc.docker.yaml ./
RUN pip install --no-cache-dir -c constraints.txt .
# CDC_CONFIG also serves `docker compose exec cdc cdc publish|results|show …`.
ENV CDC_SPARK__JARS_DIR=/app/jars/spark \
    CDC_CONFIG=/app/cdc.docker.yaml
CMD ["cdc", "run", "--config", "/app/cdc.docker.yaml"]
