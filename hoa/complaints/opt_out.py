"""The reporter's opt-out page: the link in each email about a complaint, no login needed.

``GET /reporters/opt-out/<token>/`` shows which complaint's emails it stops and a button;
``POST`` stops them (a GET changes nothing: mail scanners follow links). The POST is also
RFC 8058's one-click unsubscribe (``List-Unsubscribe-Post: List-Unsubscribe=One-Click``,
which mail providers send without a page or a CSRF token): the signed token in the address
is what allows it, for that one complaint. A token that is not one of ours is a 400.

The pages are the residents' (``residents.html``): the association's name on top, nothing
of the staff site's header or its way back to "your associations".
"""

from django.shortcuts import render
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from hoa.complaints import workflow


@method_decorator(csrf_exempt, name="dispatch")
class ReporterOptOutView(View):
    http_method_names = ["get", "post", "head"]
    template_name = "hoa/reporters/opt_out.html"

    def get(self, request, token: str):
        complaint = workflow.complaint_of(token)
        if complaint is None:
            return self.not_ours(request)
        done = complaint.reporter_opted_out_at is not None
        return self.page(request, complaint, done=done)

    def post(self, request, token: str):
        complaint = workflow.complaint_of(token)
        if complaint is None:
            return self.not_ours(request)
        workflow.opt_out(complaint)
        return self.page(request, complaint, done=True)

    def page(self, request, complaint, *, done: bool):
        context = {
            "complaint": complaint,
            "done": done,
            "association_name": complaint.organization.name,
        }
        return render(request, self.template_name, context)

    def not_ours(self, request):
        context = {
            "status": 400,
            "title": _("This link does not work"),
            "message": _(
                "This opt-out link is not one we sent, or it was cut short. Use the whole "
                "link from the email."
            ),
        }
        return render(request, "hoa/reporters/error.html", context, status=400)
