// Package ui holds the end-to-end test of the jobmanager's web UI: a real
// cluster (test/clustertest), a checkpointed job, and a headless Chromium
// driven with chromedp that opens every page, compares what it shows with
// the REST API's JSON, clicks an action and tries forged ones. The test
// needs a Chromium or Chrome binary: scripts/ensure-chromium.sh installs
// one; with WEIR_SKIP_UI=1 the test skips when none is found.
package ui
