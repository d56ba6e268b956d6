"""The reporter's opt-out page: the link in each email about a complaint, no login needed.

``GET /reporters/opt-out/<token>/`` shows which complaint's emails it stops and a button;
``POST`` stops them (a GET changes nothing: mail scanners follow links). The POST is also
RFC 8058's one-click unsubscribe (``List-Unsubscribe-Post: List-Unsubscribe=One-Click``,
which mail providers send without a page or a CSRF token): the signed token in the address
is what allows it, for that one complaint. A token that is not one of ours is a 400.
"""

from django.shortcuts import render
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from hoa.answers.pages import error_page
from hoa.complaints import reporters


@method_decorator(csrf_exempt, name="dispatch")
class ReporterOptOutView(View):
    http_method_names = ["get", "post", "head"]
    template_name = "hoa/reporters/opt_out.html"

    def get(self, request, token: str):
        complaint = reporters.complaint_of(token)
        if complaint is None:
            return self.not_ours(request)
        context = {"complaint": complaint, "done": complaint.reporter_opted_out_at is not None}
        return render(request, self.template_name, context)

    def post(self, request, token: str):
        complaint = reporters.complaint_of(token)
        if complaint is None:
            return self.not_ours(request)
        reporters.opt_out(complaint)
        return render(request, self.template_name, {"complaint": complaint, "done": True})

    def not_ours(self, request):
        return error_page(
            request,
            400,
            _("This link does not work"),
            _(
                "This opt-out link is not one we sent, or it was cut short. Use the whole "
                "link from the email."
            ),
        )
