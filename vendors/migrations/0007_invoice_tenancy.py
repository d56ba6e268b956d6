"""Tenancy held by the database: an invoice bills an assignment of its own association.

An invoice keeps its ``organization`` and ``vendor`` on the row (the lists and the
duplicate rule key on them), so the database must keep them the assignment's:

- a composite foreign key ``(assignment_id, vendor_id)`` -> ``vendors_vendorassignment
  (id, vendor_id)`` (Django 5.2 has no composite foreign keys: RunSQL): an invoice names
  the vendor of the assignment it bills;
- a row trigger on insert: the invoice's association is its assignment's complaint's
  (hoa_complaint has no ``(id, organization_id)`` key to point at, and complaints never
  change association, hoa 0005, so the check at write time holds for good);
- a row trigger on update: an invoice never moves to another association, assignment or
  vendor.

The tables are new, so there are no rows to check before the rule is added.
"""

from django.db import migrations

COMPOSITE_KEY = """
ALTER TABLE vendors_invoice
    ADD CONSTRAINT invoice_bills_an_assignment_of_its_vendor
    FOREIGN KEY (assignment_id, vendor_id) REFERENCES vendors_vendorassignment (id, vendor_id)
    ON UPDATE RESTRICT ON DELETE RESTRICT;
"""

TRIGGER = """
CREATE FUNCTION vendors_invoice_of_its_association() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF NEW.organization_id IS DISTINCT FROM OLD.organization_id
           OR NEW.assignment_id IS DISTINCT FROM OLD.assignment_id
           OR NEW.vendor_id IS DISTINCT FROM OLD.vendor_id THEN
            RAISE EXCEPTION 'invoice % bills assignment % of association % and cannot move',
                OLD.id, OLD.assignment_id, OLD.organization_id
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NOT EXISTS (
        SELECT 1
          FROM vendors_vendorassignment assignment
          JOIN hoa_complaint complaint ON complaint.id = assignment.complaint_id
         WHERE assignment.id = NEW.assignment_id
           AND complaint.organization_id = NEW.organization_id
    ) THEN
        RAISE EXCEPTION 'invoice of association % bills assignment % of another association',
            NEW.organization_id, NEW.assignment_id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END
$$;
CREATE TRIGGER invoice_of_its_association
    BEFORE INSERT OR UPDATE OF organization_id, assignment_id, vendor_id ON vendors_invoice
    FOR EACH ROW EXECUTE FUNCTION vendors_invoice_of_its_association();
"""

UNDO = """
DROP TRIGGER invoice_of_its_association ON vendors_invoice;
DROP FUNCTION vendors_invoice_of_its_association();
ALTER TABLE vendors_invoice DROP CONSTRAINT invoice_bills_an_assignment_of_its_vendor;
"""


class Migration(migrations.Migration):
    dependencies = [
        ("vendors", "0006_invoices"),
    ]

    operations = [
        migrations.RunSQL(COMPOSITE_KEY + TRIGGER, UNDO),
    ]
