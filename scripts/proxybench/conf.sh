# Configuration of the reference processes of the proxy benchmark, sourced
# by run.sh. Each function writes a config file to stdout.

# completion is the fixed answer of the instant upstream.
completion='{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"The quick brown fox jumps over the lazy dog."},"finish_reason":"stop"}],"usage":{"prompt_tokens":1024,"completion_tokens":12,"total_tokens":1036}}'

# nginx_common DIR: what every nginx here shares (one worker, no logs, its
# files under DIR).
nginx_common() {
	cat <<NGINX
worker_processes 1;
pid $1/nginx-$2.pid;
error_log $1/nginx-$2-error.log;
events { worker_connections 4096; }
NGINX
}

# nginx_upstream DIR PORT: the instant upstream, answering every request
# with the fixed completion, whatever its body.
nginx_upstream() {
	nginx_common "$1" upstream
	cat <<NGINX
http {
	access_log off;
	client_body_temp_path $1;
	keepalive_requests 1000000;
	server {
		listen 127.0.0.1:$2 backlog=4096;
		location / {
			default_type application/json;
			return 200 '$completion';
		}
	}
}
NGINX
}

# nginx_proxy DIR PORT UPSTREAM_PORT: nginx as the reference proxy, with
# keep-alive upstream connections, no response buffering, and request
# bodies up to 1 MiB kept in memory (the router keeps them in memory too).
nginx_proxy() {
	nginx_common "$1" proxy
	cat <<NGINX
http {
	access_log off;
	client_body_temp_path $1; proxy_temp_path $1;
	client_max_body_size 512m;
	client_body_buffer_size 1m;
	keepalive_requests 1000000;
	upstream workers { server 127.0.0.1:$3; keepalive 256; keepalive_requests 1000000; }
	server {
		listen 127.0.0.1:$2 backlog=4096;
		location / {
			proxy_pass http://workers;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_buffering off;
		}
	}
}
NGINX
}

# haproxy_proxy PORT UPSTREAM_PORT: HAProxy with one thread, reusing
# upstream connections.
haproxy_proxy() {
	cat <<HAPROXY
global
	nbthread 1
	maxconn 8192
defaults
	mode http
	timeout connect 5s
	timeout client 60s
	timeout server 60s
	option http-keep-alive
	http-reuse always
frontend bench
	bind 127.0.0.1:$1
	default_backend workers
backend workers
	server w1 127.0.0.1:$2
HAPROXY
}
