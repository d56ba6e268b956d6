"""Who may approve an invoice, and where its approvals stand.

One rule for the approval itself (``vendors.invoices.approve_invoice``), the invoice page
(no Approve button for whom it would refuse, and "1 of 2 approvals — waiting for someone
other than alice") and the invoices waiting for someone's approval
(``vendors.invoice_selectors.waiting_for``):

- an approval counts once per person: nobody approves an invoice twice;
- the association's ``ApprovalPolicy`` says whether the person who recorded an invoice
  may approve it. By default not, at any amount (separation of duties); an association
  that allows it lets them give the first approval, never the second.
"""

from dataclasses import dataclass
from decimal import Decimal

from vendors.exceptions import InvoiceRule
from vendors.models import ApprovalPolicy, Invoice


def approvals_needed(invoice: Invoice, threshold: Decimal) -> int:
    """Two approvals above the association's threshold, one up to it."""
    return 2 if invoice.amount > threshold else 1


@dataclass(frozen=True)
class Approver:
    pk: int
    name: str


@dataclass(frozen=True)
class Standing:
    """An invoice's approvals as they stand: how many it needs, who gave them (in order),
    who recorded it and whether the association lets them approve."""

    needed: int
    approvers: tuple[Approver, ...]
    recorder: Approver | None
    recorder_may_approve: bool

    @property
    def given(self) -> int:
        return len(self.approvers)

    def refusal(self, user_pk: int) -> InvoiceRule | None:
        """The rule an approval by the user with ``user_pk`` would break, or ``None``."""
        if any(approver.pk == user_pk for approver in self.approvers):
            return InvoiceRule.ALREADY_APPROVED_BY_YOU
        if self.recorder is not None and user_pk == self.recorder.pk:
            if not self.recorder_may_approve:
                return InvoiceRule.RECORDER_MAY_NOT_APPROVE
            if self.approvers:
                return InvoiceRule.SECOND_NOT_RECORDER
        return None

    @property
    def not_from(self) -> list[str]:
        """The people the next approval may not come from, by name."""
        names = [approver.name for approver in self.approvers]
        recorder = self.recorder
        barred = not self.recorder_may_approve or self.approvers
        if recorder is not None and barred and recorder.name not in names:
            names.append(recorder.name)
        return names


def standing(invoice: Invoice, policy: ApprovalPolicy, approvals) -> Standing:
    """Where ``invoice``'s approvals stand under ``policy``; ``approvals``: its standing
    approvals, oldest first, with their approvers."""
    recorder = invoice.recorded_by
    return Standing(
        needed=approvals_needed(invoice, policy.approval_threshold),
        approvers=tuple(
            Approver(approval.approver_id, approval.approver.get_username())
            for approval in approvals
        ),
        recorder=Approver(recorder.pk, recorder.get_username()) if recorder else None,
        recorder_may_approve=policy.recorder_may_approve,
    )
