// A Node.js MCP client (the official TypeScript SDK) that sends no
// Authorization header, driving `docket serve --mcp --mcp-url-token` over
// streamable HTTP, for TestMCPNodeClientWithoutHeader. Usage:
//   node http_client.mjs SDK_DIR BASE_URL TOKEN
// It connects to /mcp without a token (refused), follows the 401's
// resource_metadata to the protected-resource metadata as the SDK's OAuth
// discovery does, then connects at /mcp/t/TOKEN, lists the tools and calls
// docket_run_status, and prints what it got as one JSON document.
import { pathToFileURL } from "node:url";
import path from "node:path";

const [sdkDir, base, token] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(path.join(sdkDir, "dist", "esm", p)).href);
const { Client } = await load("client/index.js");
const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
const { extractWWWAuthenticateParams, discoverOAuthProtectedResourceMetadata, selectResourceURL } = await load("client/auth.js");

const out = {};
const noToken = new Client({ name: "headerless", version: "1.0.0" });
try {
  await noToken.connect(new StreamableHTTPClientTransport(new URL(base + "/mcp")));
  out.without_token = "connected";
} catch (e) {
  out.without_token = String(e);
}

// What the SDK's auth() does first: read the challenge, fetch the metadata,
// check that it is this server's.
const res = await fetch(base + "/mcp", {
  method: "POST",
  headers: { "content-type": "application/json", accept: "application/json, text/event-stream" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "ping" }),
});
out.status = res.status;
const { resourceMetadataUrl } = extractWWWAuthenticateParams(res);
out.resource_metadata_url = resourceMetadataUrl ? resourceMetadataUrl.href : null;
const md = await discoverOAuthProtectedResourceMetadata(new URL(base + "/mcp"), { resourceMetadataUrl });
out.metadata = md;
out.resource = String(await selectResourceURL(new URL(base + "/mcp"), {}, md));

const client = new Client({ name: "headerless", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(base + "/mcp/t/" + encodeURIComponent(token))));
const { tools } = await client.listTools();
out.tools = tools.map((t) => t.name);
out.status_call = await client.callTool({ name: "docket_run_status", arguments: { run_id: "nothing-here" } });
await client.close();
process.stdout.write(JSON.stringify(out) + "\n");
