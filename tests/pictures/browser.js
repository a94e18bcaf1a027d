// Headless Chromium (Debian's, driven by playwright-core) as every page check opens it: a
// throwaway profile, the page's console errors, page errors and requests beyond its own
// files collected in `out`, and everything closed and removed afterwards.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

// Runs `use(page, out)` on a fresh page of a `height`-pixel-high window; returns `out`,
// which starts as {errors: [], requests: []}.
async function withPage(height, use) {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "gpuspan-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: height },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const out = { errors: [], requests: [] };
  try {
    const page = context.pages()[0] || await context.newPage();
    page.on("console", function (m) { if (m.type() === "error") out.errors.push(m.text()); });
    page.on("pageerror", function (e) { out.errors.push(String(e)); });
    page.on("request", function (r) { if (!r.url().startsWith("file:")) out.requests.push(r.url()); });
    await use(page, out);
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  return out;
}

module.exports = { withPage };
