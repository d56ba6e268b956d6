"""Password reset that tells the truth about the mail.

Django's ``PasswordResetForm`` logs a mail it could not send and still says "we've emailed
you". Here no email configured is a 503 before anyone types an address, and a mail server
that cannot be reached or refuses the mail a 502. The connection is opened before any
account is looked up, so an unreachable server answers alike for every address.
"""

import logging

from django.conf import settings
from django.contrib.auth import forms as auth_forms
from django.contrib.auth import views as auth_views
from django.core import mail
from django.template import loader
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _

from hoa.answers.table import error_page
from hoa.security.audit import limit_password_resets

logger = logging.getLogger(__name__)


class PasswordResetForm(auth_forms.PasswordResetForm):
    """Django's form, sending through one open connection and raising when a mail fails."""

    connection = None  # the view's open connection to the mail server

    def send_mail(
        self,
        subject_template_name,
        email_template_name,
        context,
        from_email,
        to_email,
        html_email_template_name=None,
    ):
        subject = "".join(loader.render_to_string(subject_template_name, context).splitlines())
        body = loader.render_to_string(email_template_name, context)
        message = mail.EmailMultiAlternatives(
            subject, body, from_email, [to_email], connection=self.connection
        )
        if html_email_template_name is not None:
            html = loader.render_to_string(html_email_template_name, context)
            message.attach_alternative(html, "text/html")
        message.send()


@method_decorator(limit_password_resets, name="dispatch")
class PasswordResetView(auth_views.PasswordResetView):
    form_class = PasswordResetForm

    def dispatch(self, request, *args, **kwargs):
        if not settings.EMAIL_CONFIGURED:
            return error_page(
                request,
                503,
                _("Password reset is not available"),
                _(
                    "This site cannot send email, so it cannot send you a reset link. "
                    "Ask an administrator to reset your password."
                ),
            )
        return super().dispatch(request, *args, **kwargs)

    def form_valid(self, form):
        connection = mail.get_connection()
        try:
            connection.open()  # before any account is looked up (see the module's docstring)
            form.connection = connection
            return super().form_valid(form)
        except OSError as exc:  # smtplib.SMTPException, refused, timed out, TLS failed
            logger.warning(
                "password reset mail not sent: %s: %s",
                exc.__class__.__name__,
                exc,
                extra={"email_host": settings.EMAIL_HOST, "email_port": settings.EMAIL_PORT},
            )
            return error_page(
                self.request,
                502,
                _("The reset email could not be sent"),
                _(
                    "The mail server did not accept the message, so no reset link was sent. "
                    "Try again later, or ask an administrator to reset your password."
                ),
            )
        finally:
            connection.close()
