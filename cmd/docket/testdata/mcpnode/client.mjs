// A Node.js MCP client (the official TypeScript SDK) driving `docket mcp`
// over stdio, for TestMCPNodeClient. Usage:
//   node client.mjs SDK_DIR DOCKET [ARGS...]
// It lists the tools, makes identical and keyed calls and one call that
// waits for a person, and prints what it got as one JSON document.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkDir, docket, ...args] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(sdkDir, "dist", "esm", p)).href);
const { Client } = await load("client/index.js");
const { StdioClientTransport } = await load("client/stdio.js");

const transport = new StdioClientTransport({ command: docket, args, env: process.env, stderr: "inherit" });
const client = new Client({ name: "node-agent", version: "1.0.0" });
await client.connect(transport);

const out = {};
const { tools } = await client.listTools();
out.tools = Object.fromEntries(tools.map((t) => [t.name, t.annotations ?? null]));
const charge = { customer: "acme", amount: 5 };
out.first = await client.callTool({ name: "charge", arguments: charge });
out.repeat = await client.callTool({ name: "charge", arguments: charge });
const key = { "io.docket/idempotency_key": "node-order-1" };
out.keyed1 = await client.callTool({ name: "charge", arguments: { customer: "bob", amount: 7 }, _meta: key });
out.keyed2 = await client.callTool({ name: "charge", arguments: { customer: "bob", amount: 7 }, _meta: key });
out.email = await client.callTool({ name: "send_email", arguments: { to: "node@example.com", subject: "hi" } });
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
