# The one delayq image: `delayq serve` (default), `delayq-operator`, and
# `delayq-spark` (the operator's rebalance Job and compaction CronJob run it:
# pyspark and a Java runtime for Spark's local mode).
# Build: docker build -t delayq:0.1.0 .   (not buildable on the dev machine: no engine)
FROM python:3.11.14-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY service ./service
COPY operator ./operator
COPY spark ./spark
RUN pip wheel --no-cache-dir --wheel-dir /wheels '.[operator,spark]'

FROM python:3.11.14-slim-bookworm
RUN apt-get update \
 && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
 && rm -rf /var/lib/apt/lists/*
# A fixed non-root user and group: the operator's pods run as 10001:10001 with
# fsGroup 10001 (delayq_operator.desired.RUN_AS), the chart's operator likewise.
RUN groupadd --gid 10001 delayq \
 && useradd --uid 10001 --gid 10001 --create-home delayq \
 && mkdir /data && chown 10001:10001 /data
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links /wheels 'delayq[operator,spark]' \
 && rm -rf /wheels
USER 10001:10001
VOLUME /data
EXPOSE 7420 7421 7422
ENTRYPOINT ["delayq"]
CMD ["serve", "--data-dir", "/data", "--listen", "0.0.0.0:7420", "--metrics-listen", "0.0.0.0:7421"]
