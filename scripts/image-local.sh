#!/bin/sh
# Build (and smoke-test) Parley's image without Docker and without Docker Hub
# or gcr.io, on a Debian 12 (bookworm) machine as root: Debian's podman 4.3.1
# and buildah 1.28.2, with stand-ins made locally for the Dockerfile's two
# base images:
#
#   docker.io/library/golang:1.26.8-bookworm   debootstrap'd bookworm (minbase,
#       ca-certificates, git) + this machine's /usr/local/go, with GOPATH=/go,
#       PATH and GOTOOLCHAIN=local as the official image sets them
#   gcr.io/distroless/static-debian12:nonroot  CA bundle, zoneinfo,
#       passwd/group with nonroot 65532, /home/nonroot, /tmp; USER 65532
#
#   scripts/image-local.sh              stand-ins (once) + build parley:dev
#   scripts/image-local.sh stand-ins    only the two base images
#   scripts/image-local.sh build        only `podman build` (stand-ins must exist)
#   scripts/image-local.sh check        run the image against Postgres/Redis on
#                                       this host: migrate, bootstrap, 2 API
#                                       instances (--workers 0) + 1 worker, chat,
#                                       ingestion, healthcheck; then cleans up
#
# Environment: WORK (default /tmp/ctr: rootfs trees, containers.conf), IMAGE
# (parley:dev), DEBIAN_MIRROR (from /etc/apt/sources.list*), GOROOT_HOST
# (/usr/local/go, must be the Dockerfile's GO_VERSION). For check: CHECK_DB
# (ctr_check), PGHOST/PGUSER for createdb (127.0.0.1/postgres), CHECK_ROLE
# (parley), REDIS_URL (redis://127.0.0.1:6379/0), CHECK_PORTS (four ports,
# "18271 18272 18273 18274", plus the worker's metrics on 18275).
#
# This host's quirks, handled in $WORK/containers.conf (CONTAINERS_CONF; the
# system's /etc/containers is left alone):
# - root lacks CAP_SYS_RESOURCE (hard nofile 20000, nproc capped at 32768 for
#   conmon), so podman's root defaults (1048576) fail with "crun: setrlimit
#   RLIMIT_NOFILE: Operation not permitted": default_ulimits lowers them.
# - cgroup v1 hybrid with a controller (hugetlb) on the unified mount: crun
#   1.8.1 refuses ("cgroups in hybrid mode not supported"), runc 1.1.5 works.
# - egress goes through a TLS-intercepting proxy: the builder stand-in trusts
#   the CAs in /usr/local/share/ca-certificates (the runtime image does not).
# - no systemd: podman runs no periodic health checks (`podman healthcheck
#   run NAME` works; the errors about /run/systemd/private are harmless).
set -eu

WORK=${WORK:-/tmp/ctr}
IMAGE=${IMAGE:-parley:dev}
REPO=$(cd "$(dirname "$0")/.." && pwd)
GO_VERSION=$(sed -n 's/^ARG GO_VERSION=//p' "$REPO/Dockerfile")
GOROOT_HOST=${GOROOT_HOST:-/usr/local/go}
GOLANG_IMAGE=docker.io/library/golang:$GO_VERSION-bookworm
DISTROLESS_IMAGE=gcr.io/distroless/static-debian12:nonroot
export CONTAINERS_CONF="$WORK/containers.conf"

log() { printf '%s %s\n' "$(date +%T)" "$*" >&2; }

setup() {
	[ "$(id -u)" = 0 ] || { echo "run as root" >&2; exit 1; }
	mkdir -p "$WORK"
	if ! command -v podman >/dev/null || ! command -v runc >/dev/null || ! command -v debootstrap >/dev/null; then
		apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q podman buildah runc debootstrap
	fi
	cat >"$CONTAINERS_CONF" <<-'EOF'
	[containers]
	default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
	[engine]
	runtime = "runc"
	EOF
	# Fit the limits to this host (never above what root may set here).
	nofile=$(ulimit -Hn); [ "$nofile" = unlimited ] || [ "$nofile" -ge 20000 ] || sed -i "s/nofile=20000:20000/nofile=$nofile:$nofile/" "$CONTAINERS_CONF"
}

mirror() {
	if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
	m=$(grep -h -E '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
		grep -o -E 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -1 | tr -d ' ')
	echo "${m:-http://deb.debian.org/debian}"
}

stand_ins() {
	"$GOROOT_HOST/bin/go" version | grep -q "go$GO_VERSION " ||
		{ echo "$GOROOT_HOST is not go$GO_VERSION (the Dockerfile's GO_VERSION)" >&2; exit 1; }
	R="$WORK/rootfs"
	if ! podman image exists "$GOLANG_IMAGE"; then
		log "debootstrap bookworm from $(mirror) into $R"
		rm -rf "$R"
		nice -n 10 debootstrap --variant=minbase --include=ca-certificates,git bookworm "$R" "$(mirror)" >"$WORK/debootstrap.log"
		rm -rf "$R"/var/cache/apt/archives/*.deb "$R"/var/lib/apt/lists/*
		mkdir -p "$WORK/debian-ca" && cp "$R/etc/ssl/certs/ca-certificates.crt" "$WORK/debian-ca/"
		if ls /usr/local/share/ca-certificates/*.crt >/dev/null 2>&1; then
			cp /usr/local/share/ca-certificates/*.crt "$R/usr/local/share/ca-certificates/"
			chroot "$R" update-ca-certificates >/dev/null
		fi
		cp -a "$GOROOT_HOST" "$R/usr/local/go"
		mkdir -p "$R/go/src" "$R/go/bin" && chmod -R 1777 "$R/go"
		log "import $GOLANG_IMAGE"
		tar --numeric-owner -C "$R" -cf - . | nice -n 10 podman import \
			--change 'ENV PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change "ENV GOLANG_VERSION=$GO_VERSION" --change 'ENV GOTOOLCHAIN=local' --change 'ENV GOPATH=/go' \
			--change 'WORKDIR /go' --change 'CMD ["bash"]' \
			- "$GOLANG_IMAGE" >/dev/null
	fi
	if ! podman image exists "$DISTROLESS_IMAGE"; then
		[ -s "$WORK/debian-ca/ca-certificates.crt" ] && [ -d "$R/usr/share/zoneinfo" ] ||
			{ echo "need $WORK/rootfs and $WORK/debian-ca: podman rmi $GOLANG_IMAGE and run again" >&2; exit 1; }
		D="$WORK/distroless"
		log "import $DISTROLESS_IMAGE"
		rm -rf "$D"
		mkdir -p "$D/etc/ssl/certs" "$D/usr/share" "$D/home/nonroot" "$D/tmp" "$D/root"
		cp "$WORK/debian-ca/ca-certificates.crt" "$D/etc/ssl/certs/"
		cp -a "$R/usr/share/zoneinfo" "$D/usr/share/zoneinfo"
		printf '%s\n' 'root:x:0:0:root:/root:/sbin/nologin' \
			'nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin' \
			'nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin' >"$D/etc/passwd"
		printf '%s\n' 'root:x:0:' 'nobody:x:65534:' 'tty:x:5:' 'staff:x:50:' 'nonroot:x:65532:' >"$D/etc/group"
		echo 'hosts: files dns' >"$D/etc/nsswitch.conf"
		printf '%s\n' 'PRETTY_NAME="Distroless"' 'NAME="Debian GNU/Linux"' 'ID="debian"' 'VERSION_ID="12"' >"$D/etc/os-release"
		chmod 1777 "$D/tmp"; chmod 700 "$D/root" "$D/home/nonroot"; chown 65532:65532 "$D/home/nonroot"
		tar --numeric-owner -C "$D" -cf - . | podman import \
			--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
			--change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
			--change 'USER 65532' --change 'WORKDIR /home/nonroot' \
			- "$DISTROLESS_IMAGE" >/dev/null
	fi
}

build() {
	log "podman build -t $IMAGE"
	start=$(date +%s)
	nice -n 10 podman build --pull=never -f "$REPO/Dockerfile" \
		--build-arg GOPROXY="$(go env GOPROXY 2>/dev/null || echo https://proxy.golang.org,direct)" \
		-t "$IMAGE" "$REPO"
	log "built $IMAGE in $(($(date +%s) - start))s, $(podman image inspect "$IMAGE" --format '{{.Size}}') bytes"
}

check() {
	db=${CHECK_DB:-ctr_check}; role=${CHECK_ROLE:-parley}
	export PGHOST=${PGHOST:-127.0.0.1} PGUSER=${PGUSER:-postgres}
	set -- ${CHECK_PORTS:-18271 18272 18273 18274}
	a=127.0.0.1:$1; am=127.0.0.1:$2; b=127.0.0.1:$3; bm=127.0.0.1:$4; wm=127.0.0.1:$(($4 + 1))
	env="$WORK/check.env"
	names="ctr-api-1 ctr-api-2 ctr-worker"
	cleanup() {
		for n in $names; do podman rm -f -t 40 "$n" >/dev/null 2>&1 || true; done
		dropdb --if-exists "$db"
		rm -f "$env"
		# this check's rate-limit counters
		if command -v redis-cli >/dev/null; then
			redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379/0}" --scan --pattern "$db:*" |
				while read -r k; do redis-cli -u "${REDIS_URL:-redis://127.0.0.1:6379/0}" del "$k" >/dev/null; done
		fi
	}
	createdb -O "$role" "$db" # fails, before any clean-up is armed, if it exists
	trap cleanup EXIT
	psql -q -d "$db" -c 'CREATE EXTENSION IF NOT EXISTS vector'
	cat >"$env" <<-EOF
	PARLEY_DATABASE_URL=postgres://$role@127.0.0.1:5432/$db?sslmode=disable
	PARLEY_REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
	PARLEY_REDIS_PREFIX=$db
	PARLEY_MIGRATE=false
	PARLEY_SHUTDOWN_TIMEOUT=30s
	PARLEY_SECRETS_KEY=$(head -c 32 /dev/urandom | base64)
	EOF
	run="podman run --network host --env-file $env"
	# compose.yaml's health check (exec form: the image has no shell)
	api() {
		n=$1; addr=$2; metrics=$3
		$run -d --name "$n" -e PARLEY_ADDR="$addr" -e PARLEY_METRICS_ADDR="$metrics" -e PARLEY_PUBLIC_URL="http://$addr" \
			--health-cmd '["/usr/local/bin/parley","healthcheck"]' --health-interval 5s --health-timeout 5s \
			--health-retries 5 --health-start-period 60s "$IMAGE" serve --workers 0 2>/dev/null
	}

	[ "$(podman image inspect "$IMAGE" --format '{{.Config.User}}')" = 65532:65532 ]
	$run --rm "$IMAGE" help >/dev/null
	$run --rm "$IMAGE" migrate
	api ctr-api-1 "$a" "$am"
	api ctr-api-2 "$b" "$bm"
	$run -d --name ctr-worker -e PARLEY_REDIS_URL= -e PARLEY_METRICS_ADDR=$wm "$IMAGE" worker --workers 4
	i=0; until curl -fs "$a/readyz" >/dev/null && curl -fs "$b/readyz" >/dev/null; do
		i=$((i + 1)); [ $i -lt 120 ] || { podman logs ctr-api-1; exit 1; }; sleep 0.5
	done
	for n in ctr-api-1 ctr-api-2; do
		podman healthcheck run "$n" 2>/dev/null
		podman exec "$n" /usr/local/bin/parley healthcheck >/dev/null
		pid=$(podman inspect "$n" --format '{{.State.Pid}}')
		grep -q '^Uid:[[:space:]]*65532' "/proc/$pid/status"
	done
	key=$($run --rm "$IMAGE" admin bootstrap --org ImageCheck --plan pro --json | sed -E 's/.*"apiKey":"([^"]+)".*/\1/')
	auth="Authorization: Bearer $key"; json='Content-Type: application/json'
	agent=$(curl -fs -X POST "$a/api/agents" -H "$auth" -H "$json" -d '{"name":"Helper","instructions":"Be helpful."}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
	curl -fs -X POST "$a/api/v2/agent/$agent/chat" -H "$auth" -H "$json" -d '{"query":"Hello!","conversationId":"c1"}' | grep -q '"provider":"local"'
	curl -fsN -X POST "$b/api/v2/agent/$agent/chat" -H "$auth" -H "$json" -d '{"query":"Again?","conversationId":"c1","streaming":true}' | grep -q 'data: \[DONE\]'
	# Ingestion is a job: only the worker runs jobs here.
	store=$(curl -fs -X POST "$a/api/datastores" -H "$auth" -H "$json" -d '{"name":"FAQ"}' | sed -E 's/.*"id":"([^"]+)".*/\1/')
	curl -fs -X POST "$a/api/datastores/$store/datasources" -H "$auth" -H "$json" \
		-d '{"type":"text","name":"faq.md","text":"# Hours\nThe shop opens at nine and closes at six."}' >/dev/null
	i=0; until curl -fs "$b/api/datastores/$store/datasources" -H "$auth" | grep -q '"status":"synced"'; do
		i=$((i + 1)); [ $i -lt 60 ] || { podman logs ctr-worker; exit 1; }; sleep 1
	done
	shop=$(curl -fs -X POST "$a/api/agents" -H "$auth" -H "$json" -d "{\"name\":\"Shop\",\"instructions\":\"Answer from the FAQ.\",\"datastores\":[\"$store\"]}" | sed -E 's/.*"id":"([^"]+)","name".*/\1/')
	curl -fs -X POST "$b/api/v2/agent/$shop/chat" -H "$auth" -H "$json" -d '{"query":"When does the shop open?","conversationId":"f1"}' | grep -q 'opens at nine'
	curl -fs "$wm/metrics" | grep -q 'parley_job_duration_seconds_count{kind="ingest_datasource",outcome="ok"} [1-9]'
	for n in ctr-api-1 ctr-api-2 ctr-worker; do
		podman stop -t 40 "$n" >/dev/null 2>&1
		[ "$(podman inspect "$n" --format '{{.State.ExitCode}}')" = 0 ]
	done
	log "check passed: migrate, bootstrap, 2 API instances + worker, chat (JSON and SSE), ingestion by the worker, healthcheck, uid 65532, clean SIGTERM exits"
}

case "${1:-all}" in
all) setup; stand_ins; build ;;
stand-ins) setup; stand_ins ;;
build) setup; build ;;
check) setup; check ;;
*) echo "usage: $0 [all|stand-ins|build|check]" >&2; exit 2 ;;
esac
