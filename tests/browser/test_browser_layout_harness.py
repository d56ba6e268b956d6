"""The control of ``tests.harness.layout``: it finds what it claims on pages broken on purpose,
and finds nothing on a page laid out well. A measuring helper that cannot fail would let every
page "pass" (house rules).

The pages are set with ``page.set_content``: no server, no database.
"""

import pytest

from tests.browser.test_browser_staff import chromium  # noqa: F401 - fixture
from tests.harness.layout import assert_readable, layout_problems

pytestmark = [pytest.mark.browser]

STYLE = "body { margin:0; font:15px/1.5 sans-serif; } table { border-collapse:collapse; }"


@pytest.fixture
def phone(chromium):  # noqa: F811
    context = chromium.new_context(viewport={"width": 390, "height": 844})
    yield context.new_page()
    context.close()


def problems_of(page, body: str) -> list[str]:
    page.set_content(f"<!doctype html><style>{STYLE}</style><body>{body}</body>")
    return layout_problems(page)


def kinds(problems: list[str]) -> set[str]:
    return {problem.split(":", 1)[0] for problem in problems}


def test_a_page_laid_out_well_has_no_problem(phone):
    body = """
      <h1>Complaints</h1>
      <p>A long paragraph that wraps between words, as text should, across several lines of
         a narrow phone screen without any word being broken in two.</p>
      <div style="overflow-x:auto"><table><tr>
        <td style="white-space:nowrap">Overflowing gutter on the north side</td>
        <td style="white-space:nowrap">Evergreen Landscaping</td>
        <td style="white-space:nowrap">overdue by 6 hours, 12 minutes</td>
      </tr></table></div>
    """
    assert problems_of(phone, body) == []
    assert_readable(phone)  # and the assertion form agrees


def test_text_drawn_over_other_text_is_an_overlap(phone):
    body = """
      <div style="position:relative; height:3em">
        <span style="position:absolute; left:0; top:0">Overflowing gutter</span>
        <span style="position:absolute; left:30px; top:4px">high</span>
      </div>
    """
    problems = problems_of(phone, body)
    assert kinds(problems) == {"overlap"}
    assert '"Overflowing gutter"' in problems[0] and '"high"' in problems[0]


def test_table_cells_squeezed_to_a_few_pixels_are_crushed_and_overlap(phone):
    # The complaints list: a fixed-layout table of eight columns in 390 px, each
    # cell clipped to a sliver, the words spilling over the next cells.
    cells = "".join(
        f"<td>{text}</td>"
        for text in ("#12", "Overflowing", "M105", "open", "high", "2026-12-03", "Pipe", "x")
    )
    body = (
        '<table style="table-layout:fixed; width:160px">'
        f"<colgroup>{'<col style=width:20px>' * 8}</colgroup><tr>{cells}</tr></table>"
    )
    found = kinds(problems_of(phone, body))
    assert {"crushed", "overlap", "overflow"} <= found


def test_a_word_broken_mid_word_is_a_split_word(phone):
    # Each word fits the box (100 px) on a line of its own: break-all breaks it anyway.
    body = '<p style="width:100px; word-break:break-all">Go Evergreen Landscaping</p>'
    problems = problems_of(phone, body)
    assert any(p.startswith('split word: "Evergreen"') for p in problems)
    assert any(p.startswith('split word: "Landscaping"') for p in problems)
    # The same words wrapping between them (no break-all) are fine, and so is a break
    # right after a hyphen or a colon.
    assert problems_of(phone, '<p style="width:120px">Evergreen Landscaping</p>') == []
    assert problems_of(phone, '<p style="width:100px">Ruiz-Montgomery</p>') == []
    hyphen = problems_of(
        phone, '<p style="width:150px; word-break:break-all">Ana Ruiz-Montgomery</p>'
    )
    assert any(p.startswith('split word: "Ruiz-Montgomery"') for p in hyphen)


def test_a_word_wider_than_its_box_may_break_a_word_that_fits_may_not(phone):
    word = "Water" + "x" * 195  # the longest title the form takes, typed without a space
    assert problems_of(phone, f'<h1 style="overflow-wrap:break-word">{word}</h1>') == []
    assert problems_of(phone, f'<p style="overflow-wrap:anywhere">A {word} here</p>') == []
    # In a table cell, the box is what holds the table: the long word breaks in a cell of a
    # table as wide as the screen, a short one crushed into a narrow cell is still counted.
    table = (
        '<table style="width:100%"><tr><td style="overflow-wrap:anywhere">{}</td>'
        '<td style="white-space:nowrap">overdue by 6 hours</td></tr></table>'
    )
    assert problems_of(phone, table.format(word)) == []


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("2026-12-05", "broken date"),
        ("2026-12-05 17:44 PST", "broken date"),
        ("05:04:17 UTC", "broken time"),
        ("+1 555-0142", "broken phone"),
    ],
)
def test_a_date_a_time_or_a_phone_is_never_broken_even_after_a_hyphen(phone, text, kind):
    # Broken at a hyphen or a space: where the split-word rule lets a word break.
    found = problems_of(phone, f'<p style="width:2ch; overflow-wrap:anywhere">{text}</p>')
    assert kind in kinds(found), found
    # On one line, nothing to say.
    assert problems_of(phone, f"<p>Due {text} as agreed.</p>") == []


def test_overflow_wrap_anywhere_in_a_crushed_cell_is_a_split_word(phone):
    # What the old stylesheet did to the dashboard at 390 px ("Overflowin g").
    body = (
        '<table style="width:200px"><tr><td style="overflow-wrap:anywhere">Overflowing</td>'
        '<td style="white-space:nowrap">overdue by 6 hours, 12 minutes</td></tr></table>'
    )
    assert "split word" in kinds(problems_of(phone, body))


def test_a_page_wider_than_the_screen_and_cut_off_text_are_overflow(phone):
    wide = '<div style="width:600px">A wide block</div>'
    problems = problems_of(phone, wide)
    assert any(p.startswith("overflow: the page is 600 px wide") for p in problems)

    cut = (
        '<div style="width:120px; overflow:hidden; white-space:nowrap">'
        "overdue by 6 hours, 12 minutes</div>"
    )
    problems = problems_of(phone, cut)
    assert kinds(problems) == {"overflow"}
    assert "holds" in problems[0]

    # The same content in a box that scrolls it on purpose is fine.
    scrolls = '<div style="overflow-x:auto"><div style="width:600px">A wide block</div></div>'
    assert problems_of(phone, scrolls) == []


def test_a_text_box_wider_than_the_viewport_is_too_wide(phone):
    body = (
        '<div style="overflow-x:auto"><span style="white-space:nowrap">'
        + "a-resource-name-that-is-far-too-long-for-any-phone-screen " * 3
        + "</span></div>"
    )
    assert "too wide" in kinds(problems_of(phone, body))


def test_the_assertion_names_the_problems(phone):
    phone.set_content('<p style="width:100px; word-break:break-all">An Overflowing</p>')
    with pytest.raises(AssertionError, match=r'split word: "Overflowing"'):
        assert_readable(phone, "the control page")


def test_text_hidden_in_a_closed_details_is_not_drawn_but_an_open_one_is(phone):
    body = """
      <div style="position:relative; height:4em">
        <details style="position:absolute; top:0"><summary>How statuses work</summary>
          <p style="margin:0">Resolving needs a note</p></details>
        <h2 style="position:absolute; top:1.5em; margin:0; font-size:15px">Add a note</h2>
      </div>
    """
    assert problems_of(phone, body) == []
    phone.evaluate("document.querySelector('details').open = true")
    assert kinds(layout_problems(phone)) == {"overlap"}
