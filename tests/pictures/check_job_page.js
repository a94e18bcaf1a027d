// Opens a job's page (gpuspan report JOB_DIR --html) in headless Chromium (Debian's, driven
// by playwright-core) and prints what a person sees, as JSON, for the Rust test to judge:
//   node check_job_page.js PAGE.html SCREENSHOT_DIR
// Prints {errors, requests, lanes: [{rank, bars, worst, peaks, height}], tip, firstOom,
// epochs: [[cells...]], steps}.
"use strict";
const fs = require("fs");
const os = require("os");
const path = require("path");
const { chromium } = require("playwright-core");

const [page_, shots] = process.argv.slice(2);

(async function () {
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), "gpuspan-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    viewport: { width: 1400, height: 700 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync"],
  });
  const out = { errors: [], requests: [] };
  try {
    const page = context.pages()[0] || await context.newPage();
    page.on("console", function (m) { if (m.type() === "error") out.errors.push(m.text()); });
    page.on("pageerror", function (e) { out.errors.push(String(e)); });
    page.on("request", function (r) { if (!r.url().startsWith("file:")) out.requests.push(r.url()); });
    await page.goto("file://" + path.resolve(page_));
    Object.assign(out, await page.evaluate(function () {
      const lanes = Array.from(document.querySelectorAll("#lanes .lane")).map(function (g) {
        const bars = Array.from(g.querySelectorAll("rect.bar"));
        return {
          rank: g.getAttribute("data-rank"),
          bars: bars.length,
          worst: bars.filter(function (b) { return b.classList.contains("worst"); }).length,
          peaks: bars.map(function (b) { return Number(b.getAttribute("data-peak")); }),
          // Drawn height on screen, in CSS pixels, of the lane's highest bar.
          height: Math.max.apply(null, bars.map(function (b) { return b.getBoundingClientRect().height; })),
        };
      });
      const first = document.getElementById("first-oom");
      return {
        lanes: lanes,
        firstOom: first ? first.textContent : null,
        epochs: Array.from(document.querySelectorAll("#job-epochs tbody tr")).map(function (tr) {
          return Array.from(tr.cells).map(function (c) { return c.textContent; });
        }),
        steps: (document.getElementById("job-steps") || {}).textContent || null,
      };
    }));
    // What the browser shows when hovering the last rank's first bar.
    out.tip = await page.evaluate(function () {
      const lanes = document.querySelectorAll("#lanes .lane");
      const bar = lanes[lanes.length - 1].querySelector("rect.bar");
      return bar.querySelector("title").textContent;
    });
    await page.screenshot({ path: path.join(shots, "job-report.png"), fullPage: true });
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
  console.log(JSON.stringify(out));
})().catch(function (e) { console.error(e); process.exit(1); });
