"""What the layout form draws on a row, read from its rendered line (tests look where the operator looks)."""

from __future__ import annotations

from dataclasses import dataclass

from console.widgets.layout_form import FIELDS, LABEL_W, VALUE_W, VARIANT, LayoutForm


@dataclass(frozen=True)
class FormRow:
    label: str
    value: str  # the value cell without the choice marks (‹›) or padding; the variant's label on row 0
    note: str  # the finding's note drawn beside the value ("" when none)


def form_row(form: LayoutForm, path: str) -> FormRow:
    """The row of `path` (or VARIANT) as the form draws it now."""
    y = 0 if path == VARIANT else 1 + [f.path for f in FIELDS].index(path)
    text = form.render_line(y).text
    if y == 0:
        return FormRow(text[:LABEL_W].strip(), text[LABEL_W:].strip().strip("‹›"), "")
    value = text[LABEL_W : LABEL_W + VALUE_W].strip().strip("‹›")
    return FormRow(text[:LABEL_W].strip(), value, text[LABEL_W + VALUE_W :].strip())
