// Live runs page: poll the experiment's /live; when a newer step is recorded, redraw the page's body in place.
(function () {
  const runs = document.getElementById("runs");
  if (!runs) return;
  async function poll() {
    try {
      const live = await (await fetch(runs.dataset.base + "/live", { credentials: "same-origin" })).json();
      const state = document.getElementById("state");
      if (live.step > Number(runs.dataset.latest) || (state && state.textContent !== live.state)) {
        const body = await fetch(runs.dataset.base + "/?fragment=1", { credentials: "same-origin" });
        if (body.ok) {
          runs.innerHTML = await body.text();
          runs.dataset.latest = String(live.step);
        }
      }
    } catch (err) {
      // the swarm may be restarting: try again at the next tick
    }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
