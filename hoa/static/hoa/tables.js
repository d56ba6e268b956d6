// Marks each table box that scrolls sideways (data-scrolls), so that only those show the
// shadow on the side where columns are hidden (site.css). Without JavaScript: no shadow.
(() => {
  const mark = () => {
    for (const box of document.querySelectorAll('.table-wrap')) {
      box.toggleAttribute('data-scrolls', box.scrollWidth > box.clientWidth + 1);
    }
  };
  document.addEventListener('DOMContentLoaded', mark);
  window.addEventListener('resize', mark);
  document.addEventListener('htmx:afterSwap', mark);  // the lock page's refreshed holders
})();

// A <details class="fold"> (the complaints' filters) comes open; on a phone it is folded
// under its summary, so the list it filters is on the first screen. Without JavaScript: open.
(() => {
  const phone = window.matchMedia('(max-width: 640px)');
  const fold = () => {
    for (const box of document.querySelectorAll('details.fold')) box.open = !phone.matches;
  };
  document.addEventListener('DOMContentLoaded', fold);
  phone.addEventListener('change', fold);
})();
