"""A stand-in for `vllm serve` where vLLM cannot run (no GPU): answers /health on the host and
port the plan gives it, until stopped. Used by the CPU rehearsal of a dedicated serving node."""

import argparse
from http.server import BaseHTTPRequestHandler, HTTPServer


class Health(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("command")  # serve (the model and the rest of `vllm serve`'s options follow)
    parser.add_argument("--host")
    parser.add_argument("--port", type=int)
    args, _ = parser.parse_known_args()
    print(f"stand-in vLLM server on {args.host}:{args.port}", flush=True)
    HTTPServer((args.host, args.port), Health).serve_forever()
