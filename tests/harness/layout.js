// The measurement of tests/harness/layout.py, run in the page by page.evaluate.
({overlapPx2, crushedPx}) => {
  const problems = [];
  const vw = document.documentElement.clientWidth;
  // Drawn at all: not display:none, hidden, transparent, nor in a closed <details>
  // (checkVisibility sees content-visibility, which hides a closed details' content).
  const visible = (el) => el.checkVisibility({checkOpacity: true, checkVisibilityCSS: true});
  const scrollsX = (el) => ['auto', 'scroll'].includes(getComputedStyle(el).overflowX);
  const hides = (el) => ['hidden', 'clip'].includes(getComputedStyle(el).overflowX);
  // The boxes that clip a node: each ancestor that scrolls or hides overflow.
  const clipOf = (el) => {
    let clip = {left: -Infinity, right: Infinity, top: -Infinity, bottom: Infinity};
    for (let e = el; e && e !== document.documentElement && e !== document.body; e = e.parentElement) {
      if (scrollsX(e) || hides(e)) {
        const r = e.getBoundingClientRect();
        clip = {left: Math.max(clip.left, r.left), right: Math.min(clip.right, r.right),
                top: Math.max(clip.top, r.top), bottom: Math.min(clip.bottom, r.bottom)};
      }
    }
    return clip;
  };
  const describe = (node) => {
    const el = node.nodeType === 1 ? node : node.parentElement;
    const id = el.id ? '#' + el.id : '';
    const cls = el.classList.length ? '.' + [...el.classList].join('.') : '';
    const text = (node.textContent || '').trim().replace(/\s+/g, ' ').slice(0, 40);
    return `<${el.tagName.toLowerCase()}${id}${cls}> "${text}"`;
  };

  // The box a word is laid out in: the nearest ancestor that is a box of its own, not an
  // inline run nor a part of a table (a table cell is as wide as its table lets it be, so a
  // word crushed in a cell is measured against what holds the table).
  const tableParts = ['table', 'inline-table', 'table-cell', 'table-row', 'table-row-group',
    'table-header-group', 'table-footer-group', 'table-column', 'table-column-group', 'table-caption'];
  const boxOf = (el) => {
    let e = el;
    while (e && e !== document.body) {
      const display = getComputedStyle(e).display;
      if (display !== 'inline' && display !== 'contents' && !tableParts.includes(display)) break;
      e = e.parentElement;
    }
    const style = getComputedStyle(e);
    return e.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  };
  // Dates, times and phone numbers are read as one thing: never broken, anywhere in them
  // (not even after the hyphen of 2026-12-05 or 555-0142).
  const UNBROKEN = [
    ['date', /\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}(?::\d{2})?(?: [A-Z]{2,5}(?![A-Za-z])|[+-]\d{2}(?::?\d{2})?)?)?/g],
    ['time', /(?<![\d:-])\d{1,2}:\d{2}(?::\d{2})?(?: ?[AaPp]\.?[Mm]\.?)?(?: [A-Z]{2,5}(?![A-Za-z]))?/g],
    ['phone', /(?<![\w-])\+?\(?\d[\d ()./-]{5,}\d(?![\w-])/g],
  ];

  // Every visible text node with its boxes, clipped to its scroll boxes.
  const nodes = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode: (n) => n.textContent.trim() && !['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'OPTION', 'TEXTAREA', 'TITLE'].includes(n.parentElement.tagName)
      ? NodeFilter.FILTER_ACCEPT : NodeFilter.FILTER_REJECT,
  });
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    if (!visible(n.parentElement)) continue;
    if (n.parentElement.closest('.visually-hidden, .skip, select, svg')) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    const clip = clipOf(n.parentElement);
    const rects = [];
    for (const r of range.getClientRects()) {
      if (r.width < 0.5 || r.height < 0.5) continue;
      if (r.width > vw + 0.5) problems.push(`too wide: ${describe(n)} is ${Math.round(r.width)} px wide, the viewport ${vw} px`);
      const c = {left: Math.max(r.left, clip.left), right: Math.min(r.right, clip.right),
                 top: Math.max(r.top, clip.top), bottom: Math.min(r.bottom, clip.bottom)};
      if (c.right - c.left > 0.5 && c.bottom - c.top > 0.5) rects.push(c);
    }
    if (rects.length) nodes.push({node: n, rects});

    // Words on more than one line: a run of non-space characters whose first and last
    // characters are on different lines, broken between two letters or digits. A break
    // after a hyphen, a slash, a colon, a dot or an "@" (a resource name, an e-mail address,
    // "Ruiz-Montgomery") is where a reader expects one, and is not counted; nor is a word
    // wider than its box (a 200-character title typed without a space), which has to break.
    const text = n.textContent;
    const charBox = (i) => {
      const r = document.createRange();
      r.setStart(n, i); r.setEnd(n, i + 1);
      return r.getBoundingClientRect();
    };
    const onTwoLines = (from, to) => {
      const a = charBox(from), b = charBox(to - 1);
      return a.height && b.height && b.top >= a.bottom - 1;
    };
    for (const [kind, pattern] of UNBROKEN) {
      for (const m of text.matchAll(pattern)) {
        if (kind === 'phone' && (m[0].match(/\d/g) || []).length < 7) continue;
        if (onTwoLines(m.index, m.index + m[0].length)) {
          problems.push(`broken ${kind}: "${m[0]}" of ${describe(n)} is broken across lines`);
        }
      }
    }
    const box = boxOf(n.parentElement);
    for (const m of text.matchAll(/\S{2,}/g)) {
      const end = m.index + m[0].length;
      const a = charBox(m.index), b = charBox(end - 1);
      if (!a.height || !b.height || b.top < a.bottom - 1) continue;
      let wide = 0;
      for (let i = m.index; i < end; i++) wide += charBox(i).width;
      if (wide > box + 1) continue;  // wider than its box: it has to break somewhere
      let top = a.top;
      for (let i = m.index + 1; i < end; i++) {
        const box = charBox(i);
        if (!box.height || box.top < top + 1) continue;
        top = box.top;
        if (!/[-\u2010\u2011/:.@_,;)\]]/.test(text[i - 1])) {
          const at = `${text.slice(m.index, i)}|${text.slice(i, end)}`.slice(0, 50);
          problems.push(`split word: "${m[0].slice(0, 40)}" of ${describe(n)} is broken across lines (${at})`);
          break;
        }
      }
    }
  }

  // Text over text: any two rects of different nodes.
  const seen = new Set();
  for (let i = 0; i < nodes.length; i++) {
    for (let j = i + 1; j < nodes.length; j++) {
      for (const a of nodes[i].rects) {
        for (const b of nodes[j].rects) {
          const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
          const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
          if (w > 0 && h > 0 && w * h > overlapPx2) {
            const key = `${i}:${j}`;
            if (!seen.has(key)) {
              seen.add(key);
              problems.push(`overlap: ${describe(nodes[i].node)} and ${describe(nodes[j].node)} share ${Math.round(w * h)} px²`);
            }
          }
        }
      }
    }
  }

  // Content wider than its box, where the box does not scroll it on purpose.
  const root = document.documentElement;
  if (root.scrollWidth > root.clientWidth + 1) {
    problems.push(`overflow: the page is ${root.scrollWidth} px wide, the viewport ${root.clientWidth} px`);
  }
  for (const el of document.body.querySelectorAll('*')) {
    if (!visible(el) || scrollsX(el) || el.closest('svg, select, .visually-hidden, .skip')) continue;
    const style = getComputedStyle(el);
    if (style.display === 'inline' || style.display === 'contents') continue;
    if (el.scrollWidth > el.clientWidth + 1 && el.clientWidth > 0) {
      // Only an element whose own text or children are cut off or spill out counts; one
      // whose overflow lands inside a scroll box below it is that box's business.
      problems.push(`overflow: ${describe(el)} holds ${el.scrollWidth} px in ${el.clientWidth} px`);
    }
  }

  // Crushed cells: a cell with text, narrower than a few characters.
  for (const cell of document.querySelectorAll('td, th')) {
    if (!visible(cell) || !cell.textContent.trim()) continue;
    const r = cell.getBoundingClientRect();
    if (r.width > 0 && r.width < crushedPx) {
      problems.push(`crushed: ${describe(cell)} is ${Math.round(r.width)} px wide`);
    }
  }
  return problems;
}
