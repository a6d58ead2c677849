// A minimal second client for the Flux port protocol, version 1 (../../PROTOCOL.md),
// in JavaScript with Node's standard library only. It shows the protocol is
// language-neutral: framing, handshake, a file read and a `run`.
//
// Usage: node flux-port-client.mjs unix:/path/to/socket read PATH
//        node flux-port-client.mjs unix:/path/to/socket run ARG0 [ARG...]
// Prints one JSON line with the decoded result; exits 1 on an error frame or a refusal.
// A token, if the server needs one, is read from the FLUX_TOKEN environment variable.

import net from "node:net";
import process from "node:process";

const MAX_FRAME = 8 * 1024 * 1024;

function encode(message) {
  const body = Buffer.from(JSON.stringify(message), "utf8");
  if (body.length > MAX_FRAME) throw new Error("frame over the ceiling");
  const header = Buffer.alloc(4);
  header.writeUInt32BE(body.length, 0);
  return Buffer.concat([header, body]);
}

class Decoder {
  constructor() {
    this.buf = Buffer.alloc(0);
  }
  feed(data) {
    this.buf = Buffer.concat([this.buf, data]);
    const out = [];
    while (this.buf.length >= 4) {
      const length = this.buf.readUInt32BE(0);
      // Refused from the header alone, before the body is read or allocated.
      if (length === 0 || length > MAX_FRAME) throw new Error(`bad frame length ${length}`);
      if (this.buf.length < 4 + length) break;
      const value = JSON.parse(this.buf.subarray(4, 4 + length).toString("utf8"));
      if (value === null || typeof value !== "object" || Array.isArray(value)) {
        throw new Error("frame body is not an object");
      }
      out.push(value);
      this.buf = this.buf.subarray(4 + length);
    }
    return out;
  }
}

function connect(target) {
  if (!target.startsWith("unix:")) throw new Error("this client speaks unix:PATH only");
  return net.createConnection({ path: target.slice("unix:".length) });
}

async function main() {
  const [target, op, ...rest] = process.argv.slice(2);
  const sock = connect(target);
  const decoder = new Decoder();
  const waiting = [];
  const queued = [];
  sock.on("data", (data) => {
    for (const msg of decoder.feed(data)) {
      const w = waiting.shift();
      if (w) w(msg);
      else queued.push(msg);
    }
  });
  const next = () =>
    new Promise((resolve, reject) => {
      if (queued.length) return resolve(queued.shift());
      waiting.push(resolve);
      sock.once("error", reject);
      sock.once("close", () => reject(new Error("connection closed")));
    });

  const hello = { type: "hello", protocol: "flux-port", versions: [1], client: "node-example" };
  if (process.env.FLUX_TOKEN) hello.token = process.env.FLUX_TOKEN;
  sock.write(encode(hello));
  const welcome = await next();
  if (welcome.type !== "welcome") throw new Error(`refused: ${welcome.reason}: ${welcome.message}`);

  let request;
  if (op === "read") request = { type: "request", id: 1, op: "read_bytes", args: { path: rest[0] } };
  else if (op === "run") request = { type: "request", id: 1, op: "run", args: { argv: rest } };
  else throw new Error(`unknown op ${op}`);
  sock.write(encode(request));

  const download = [];
  for (;;) {
    const msg = await next();
    if (msg.type === "chunk" && msg.id === 1) download.push(Buffer.from(msg.data, "base64"));
    else if (msg.type === "error") {
      console.log(JSON.stringify({ error: msg.error }));
      process.exitCode = 1;
      break;
    } else if (msg.type === "result") {
      const v = msg.value;
      let out;
      if (op === "read") {
        const data = "data" in v ? Buffer.from(v.data, "base64") : Buffer.concat(download);
        if (data.length !== v.size) throw new Error("short read");
        out = { server: welcome.server.hostname, version: welcome.version, text: data.toString("utf8") };
      } else {
        out = {
          exit_code: v.exit_code,
          stdout: Buffer.from(v.stdout, "base64").toString("utf8"),
          stderr: Buffer.from(v.stderr, "base64").toString("utf8"),
        };
      }
      console.log(JSON.stringify(out));
      break;
    }
  }
  sock.end();
}

main().catch((err) => {
  console.error(`flux-port-client: ${err.message}`);
  process.exitCode = 2;
});
