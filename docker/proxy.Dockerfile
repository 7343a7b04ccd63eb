# The reverse proxy in front of semworld (docker/nginx.conf): Debian's nginx package, the same one the tests run.
#   docker build -f docker/proxy.Dockerfile -t semworld-proxy .
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends nginx=1.22.* \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /var/lib/semworld-proxy \
    && chown www-data:www-data /var/lib/semworld-proxy
COPY docker/nginx.conf /etc/nginx/semworld.conf
USER 33:33  # www-data in Debian
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/8080"]
CMD ["nginx", "-p", "/var/lib/semworld-proxy/", "-c", "/etc/nginx/semworld.conf", "-g", "daemon off;"]
