# Varnish in front of explorer-edge (docs/cdn.md, "Varnish"): answers
# cached for the lifetime the edge gives CDNs (CDN-Cache-Control, RFC
# 9213), indexed by the tags of the edge's xkey header, and purged by the
# edge's purge sender (cdn.provider: varnish) with PURGE and
# xkey-purge / xkey-softpurge. Needs Varnish 6 or later with the xkey
# module (Debian: varnish, varnish-modules).
#
# Set the backend to the edge's public port (or a load balancer in front
# of the nodes) and the purgers ACL to the addresses of the edge nodes:
# whoever may send PURGE may empty the cache.
vcl 4.1;

import std;
import xkey;

backend edge {
    .host = "127.0.0.1";
    .port = "8080";
}

acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "PURGE not allowed from this address"));
        }
        if (req.http.xkey-purge) {
            set req.http.x-purged = xkey.purge(req.http.xkey-purge);
        } elsif (req.http.xkey-softpurge) {
            set req.http.x-purged = xkey.softpurge(req.http.xkey-softpurge);
        } else {
            return (synth(400, "xkey-purge or xkey-softpurge required"));
        }
        return (synth(200, "purged " + req.http.x-purged));
    }
    if (req.method != "GET" && req.method != "HEAD") {
        return (pass);
    }
    # The edge's answers depend on the URL, Accept-Encoding and Origin
    # (Vary), never on cookies or credentials: signed clients
    # (auth.mode: signed) must not be shared.
    if (req.http.SVC-ACCESS-KEY || req.http.Authorization) {
        return (pass);
    }
    unset req.http.Cookie;
    return (hash);
}

sub vcl_backend_response {
    # The lifetime for CDNs: CDN-Cache-Control's max-age less Age (as
    # RFC 9111 counts max-age), its stale-while-revalidate as grace and
    # stale-if-error as keep. Without it, Varnish reads Cache-Control.
    if (beresp.http.CDN-Cache-Control ~ "max-age=[0-9]+") {
        set beresp.ttl = std.duration(regsub(beresp.http.CDN-Cache-Control, "^.*max-age=([0-9]+).*$", "\1s"), 0s)
            - std.duration(beresp.http.Age + "s", 0s);
        if (beresp.ttl < 0s) {
            set beresp.ttl = 0s;
        }
        set beresp.grace = 0s;
        if (beresp.http.CDN-Cache-Control ~ "stale-while-revalidate=[0-9]+") {
            set beresp.grace = std.duration(regsub(beresp.http.CDN-Cache-Control, "^.*stale-while-revalidate=([0-9]+).*$", "\1s"), 0s);
        }
        if (beresp.http.CDN-Cache-Control ~ "stale-if-error=[0-9]+") {
            set beresp.keep = std.duration(regsub(beresp.http.CDN-Cache-Control, "^.*stale-if-error=([0-9]+).*$", "\1s"), 0s);
        }
    }
    # Errors say no-store: never kept.
    if (beresp.http.Cache-Control ~ "no-store") {
        set beresp.uncacheable = true;
        set beresp.ttl = 0s;
    }
}

sub vcl_deliver {
    # The tags and the CDN's lifetime are for this tier, not for browsers.
    unset resp.http.xkey;
    unset resp.http.CDN-Cache-Control;
    if (obj.hits > 0) {
        set resp.http.X-Cache = "HIT";
    } else {
        set resp.http.X-Cache = "MISS";
    }
}
